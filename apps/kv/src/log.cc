#include "log.h"

#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>

namespace fabric_lib::kv::log {

Level threshold() {
  static const Level level = [] {
    const char* v = std::getenv("FABRIC_LIB_LOG");
    if (!v) return Level::kWarn;
    if (!std::strcmp(v, "trace") || !std::strcmp(v, "debug")) return Level::kDebug;
    if (!std::strcmp(v, "info")) return Level::kInfo;
    if (!std::strcmp(v, "error")) return Level::kError;
    if (!std::strcmp(v, "off")) return Level::kOff;
    return Level::kWarn;
  }();
  return level;
}

void write(Level level, const char* fmt, ...) {
  static std::mutex mu;
  static const char* names[] = {"", "debug", "info", "warn", "error"};
  char line[1024];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(line, sizeof(line), fmt, args);
  va_end(args);
  std::lock_guard lock(mu);
  std::fprintf(stderr, "[fabric_lib.kv] [%s] %s\n", names[static_cast<int>(level)], line);
}

}  // namespace fabric_lib::kv::log

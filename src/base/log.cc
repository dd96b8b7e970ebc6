#include "base/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>
#include <memory>

namespace fabric_lib::log {

spdlog::logger& logger() {
  static std::shared_ptr<spdlog::logger> instance = [] {
    auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
    auto l = std::make_shared<spdlog::logger>("fabric_lib", sink);
    l->set_pattern("[%H:%M:%S.%e] [fabric_lib] [%^%l%$] [pid %P] %v");
    const char* env = std::getenv("FABRIC_LIB_LOG");
    l->set_level(env ? spdlog::level::from_str(env) : spdlog::level::warn);
    return l;
  }();
  return *instance;
}

}  // namespace fabric_lib::log

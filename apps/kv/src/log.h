// The KV app's log lines: stderr, at the level FABRIC_LIB_LOG names (the engine's variable:
// trace, debug, info, warn (default), error, off). Apps use the public API only, so this is not
// the engine's logger.
#pragma once

#include <cstdarg>
#include <cstdio>

namespace fabric_lib::kv::log {

enum class Level { kDebug = 1, kInfo = 2, kWarn = 3, kError = 4, kOff = 5 };
Level threshold();
void write(Level level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace fabric_lib::kv::log

#define KV_LOG(level, ...)                                                                      \
  do {                                                                                         \
    if (::fabric_lib::kv::log::Level::level >= ::fabric_lib::kv::log::threshold())            \
      ::fabric_lib::kv::log::write(::fabric_lib::kv::log::Level::level, __VA_ARGS__);          \
  } while (0)

// The library's one logging module (spdlog). Level from FABRIC_LIB_LOG:
// trace, debug, info, warn (default), error, critical, off.
#pragma once

#include <spdlog/spdlog.h>

namespace fabric_lib::log {

// The library's logger, created on first use.
spdlog::logger& logger();

}  // namespace fabric_lib::log

#define FL_LOG_TRACE(...) ::fabric_lib::log::logger().trace(__VA_ARGS__)
#define FL_LOG_DEBUG(...) ::fabric_lib::log::logger().debug(__VA_ARGS__)
#define FL_LOG_INFO(...) ::fabric_lib::log::logger().info(__VA_ARGS__)
#define FL_LOG_WARN(...) ::fabric_lib::log::logger().warn(__VA_ARGS__)
#define FL_LOG_ERROR(...) ::fabric_lib::log::logger().error(__VA_ARGS__)

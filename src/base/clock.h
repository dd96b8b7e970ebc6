// The engine's one clock: monotonic nanoseconds (steady_clock), as plain integers for deadlines,
// stall detection and latency records.
#pragma once

#include <chrono>
#include <cstdint>

namespace fabric_lib {

inline int64_t monotonic_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A steady_clock time point as monotonic_ns() counts it.
inline int64_t to_monotonic_ns(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

}  // namespace fabric_lib

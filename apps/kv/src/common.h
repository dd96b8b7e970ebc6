// Small helpers shared by the decoder and the prefiller.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "fabric_lib/kv/messages.h"

namespace fabric_lib::kv {

using Clock = std::chrono::steady_clock;

inline uint64_t new_incarnation() {
  std::random_device rd;
  uint64_t v = 0;
  while (v == 0) v = (uint64_t(rd()) << 32) ^ rd() ^ uint64_t(Clock::now().time_since_epoch().count());
  return v;
}

inline uint32_t remaining_ms(Clock::time_point deadline, Clock::time_point now) {
  if (deadline <= now) return 1;
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
  return static_cast<uint32_t>(std::clamp<int64_t>(ms, 1, UINT32_MAX));
}

// True when `pages` has no repeats and every entry is below `limit`.
inline bool pages_valid(const std::vector<uint32_t>& pages, uint32_t limit) {
  std::vector<uint32_t> s = pages;
  std::sort(s.begin(), s.end());
  return std::adjacent_find(s.begin(), s.end()) == s.end() && (s.empty() || s.back() < limit);
}

// Logs the first few malformed messages and then every 1000th.
inline bool should_log_nth(uint64_t n) { return n <= 10 || n % 1000 == 0; }

}  // namespace fabric_lib::kv

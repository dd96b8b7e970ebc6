// The largest of a list of page indices, for range checks that test one index instead of each.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace fabric_lib {

// 0 for an empty list. Sixteen running maxima instead of one: a single running maximum is a
// chain of dependent compare-and-moves (~0.7 ns an index on the GPU machine's CPU at -O2, 5.5 us
// of a 4096-page write's two lists in a profile), while independent lanes become vector
// instructions at -O2 and -O3 alike (SSE2's compare and blend; 2.5x faster at -O2, 2x at -O3,
// docs/benchmarks.md).
inline uint32_t largest_index(std::span<const uint32_t> indices) {
  constexpr size_t kLanes = 16;
  const uint32_t* p = indices.data();
  const size_t n = indices.size();
  uint32_t lane[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (size_t k = 0; k < kLanes; ++k) lane[k] = lane[k] > p[i + k] ? lane[k] : p[i + k];
  }
  uint32_t largest = 0;
  for (; i < n; ++i) largest = largest > p[i] ? largest : p[i];
  for (size_t k = 0; k < kLanes; ++k) largest = largest > lane[k] ? largest : lane[k];
  return largest;
}

}  // namespace fabric_lib

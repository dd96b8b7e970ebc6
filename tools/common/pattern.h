// Deterministic byte patterns for verifying transfers: byte i of pattern `seed` depends on both,
// so misplaced, duplicated or stale bytes are caught.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

namespace fabric_lib::tools {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The pattern byte at absolute position `i`.
inline uint8_t pattern_byte(uint64_t seed, uint64_t i) {
  return static_cast<uint8_t>(splitmix64(seed ^ (i >> 3) * 0x100000001b3ull) >> ((i & 7) * 8));
}

// Fills p[0..n) with pattern bytes at positions [first, first + n).
inline void fill_pattern(uint8_t* p, size_t n, uint64_t seed, uint64_t first = 0) {
  for (size_t k = 0; k < n; ++k) p[k] = pattern_byte(seed, first + k);
}

// Index of the first byte of p[0..n) that differs from the pattern, or n when all match.
inline size_t find_pattern_mismatch(const uint8_t* p, size_t n, uint64_t seed, uint64_t first = 0) {
  for (size_t k = 0; k < n; ++k) {
    if (p[k] != pattern_byte(seed, first + k)) return k;
  }
  return n;
}

// FNV-1a over bytes, for comparing large regions across processes.
inline uint64_t fnv1a(const uint8_t* p, size_t n, uint64_t h = 1469598103934665603ull) {
  for (size_t k = 0; k < n; ++k) h = (h ^ p[k]) * 1099511628211ull;
  return h;
}

// Lower-case hex of fnv1a, 16 digits.
inline std::string fnv1a_hex(const uint8_t* p, size_t n) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(fnv1a(p, n)));
  return buf;
}

}  // namespace fabric_lib::tools

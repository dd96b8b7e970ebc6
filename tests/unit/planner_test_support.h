// Shared by the planner tests (shard_planner_test.cc, request_plan_test.cc): the lengths, routes
// and start domains they sweep, and the rules' expected answers written out independently.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "core/shard_planner.h"
#include "fabric_lib/requests.h"

namespace fabric_lib::testing_planner {

constexpr uint64_t KiB = 1024;
constexpr uint64_t MiB = 1024 * 1024;

inline std::string route_name(const Route& r) {
  if (const Pinned* p = std::get_if<Pinned>(&r)) return "Pinned{" + std::to_string(p->domain) + "}";
  return "RoundRobin{" + std::to_string(std::get<RoundRobin>(r).max_shards) + "}";
}

inline std::vector<uint64_t> test_lengths() {
  std::vector<uint64_t> v = {0,        1,         4095,      4096,          4097,         64 * KiB - 1,
                             64 * KiB, 64 * KiB + 1, 128 * KiB - 1, 128 * KiB, 128 * KiB + 1, 200 * KiB,  MiB,  MiB + 3,
                             17 * MiB + 12345, 64 * MiB, 3 * kMaxWrBytes + 5, 40 * kMaxWrBytes + 1};
  std::mt19937_64 rng(2024);
  for (int i = 0; i < 24; ++i) {
    // Log-uniform-ish: random bit width, then random value of that width.
    const int bits = 1 + static_cast<int>(rng() % 36);
    v.push_back(1 + rng() % (uint64_t{1} << bits));
  }
  return v;
}

inline std::vector<Route> test_routes(size_t n) {
  std::vector<Route> r = {RoundRobin{0}, RoundRobin{1}, RoundRobin{2}, RoundRobin{3},
                          RoundRobin{static_cast<uint32_t>(n)}, RoundRobin{static_cast<uint32_t>(n + 5)},
                          Pinned{0}, Pinned{static_cast<uint32_t>(n - 1)}, Pinned{static_cast<uint32_t>(n / 2)}};
  return r;
}

inline std::vector<uint32_t> test_starts(size_t n) {
  return {0, 1, static_cast<uint32_t>(n - 1), 7, 1000003, 0xfffffff0u};
}

inline size_t expected_limit(const Route& route, size_t n) {
  if (std::holds_alternative<Pinned>(route)) return 1;
  const uint32_t k = std::get<RoundRobin>(route).max_shards;
  return k == 0 ? n : std::min<size_t>(k, n);
}

// Shards and by-peer scatter targets rotate over the route's limit of consecutive domains.
inline uint32_t expected_domain(size_t i, const Route& route, size_t n, uint32_t start) {
  if (const Pinned* p = std::get_if<Pinned>(&route)) return p->domain;
  return static_cast<uint32_t>((uint64_t{start} + i % expected_limit(route, n)) % n);
}

// Shards of a contiguous plan: maximal runs of consecutive pieces on the same domain.

}  // namespace fabric_lib::testing_planner

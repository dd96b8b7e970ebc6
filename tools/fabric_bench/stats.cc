#include "fabric_bench/stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace fabric_lib::bench {

double percentile_of_sorted(std::span<const double> sorted, double p) {
  if (sorted.empty()) return 0;
  p = std::clamp(p, 0.0, 100.0);
  // Rank in 1..n; p = 0 maps to rank 1. The small epsilon keeps e.g. 50% of 10 samples at
  // rank 5 despite floating-point noise in p / 100 * n.
  const double exact = p / 100.0 * static_cast<double>(sorted.size());
  size_t rank = static_cast<size_t>(std::ceil(exact - 1e-9));
  rank = std::clamp<size_t>(rank, 1, sorted.size());
  return sorted[rank - 1];
}

std::optional<LatencySummary> summarize(std::span<const double> samples) {
  if (samples.empty()) return std::nullopt;
  std::vector<double> sorted(samples.begin(), samples.end());
  std::sort(sorted.begin(), sorted.end());
  LatencySummary s;
  s.count = sorted.size();
  s.min = sorted.front();
  s.max = sorted.back();
  s.p50 = percentile_of_sorted(sorted, 50);
  s.p99 = percentile_of_sorted(sorted, 99);
  s.mean = std::accumulate(sorted.begin(), sorted.end(), 0.0) / static_cast<double>(sorted.size());
  return s;
}

std::optional<LatencySummary> summarize_ns_as_us(std::span<const uint32_t> samples_ns) {
  std::vector<double> us;
  us.reserve(samples_ns.size());
  for (uint32_t ns : samples_ns) us.push_back(ns / 1000.0);
  return summarize(us);
}

Throughput throughput_of(uint64_t bytes, uint64_t ops, double seconds) {
  if (!(seconds > 0)) return {};
  return {static_cast<double>(bytes) * 8.0 / seconds / 1e9, static_cast<double>(ops) / seconds / 1e6};
}

}  // namespace fabric_lib::bench

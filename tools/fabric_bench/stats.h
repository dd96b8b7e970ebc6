// Statistics of fabric-bench: percentiles of latency samples and throughput figures.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace fabric_lib::bench {

// The nearest-rank percentile: the smallest sample such that at least p% of the samples are <= it
// (p in [0, 100]; p = 0 gives the minimum). `sorted` must be sorted ascending and non-empty.
// Nearest rank (rather than interpolation) always reports a latency that was really observed.
double percentile_of_sorted(std::span<const double> sorted, double p);

// Summary of a set of latency samples (any unit; the caller's).
struct LatencySummary {
  size_t count = 0;
  double min = 0;
  double p50 = 0;
  double p99 = 0;
  double max = 0;
  double mean = 0;
};

// nullopt when there are no samples. Sorts a copy; the input is left alone.
std::optional<LatencySummary> summarize(std::span<const double> samples);
// Same, for integer nanosecond samples, reported in microseconds.
std::optional<LatencySummary> summarize_ns_as_us(std::span<const uint32_t> samples_ns);

// Bandwidth and operation rate of `bytes` and `ops` moved in `seconds`.
struct Throughput {
  double gbps = 0;  // 10^9 bits per second
  double mops = 0;  // 10^6 operations per second
};
Throughput throughput_of(uint64_t bytes, uint64_t ops, double seconds);

}  // namespace fabric_lib::bench

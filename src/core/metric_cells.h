// The cells the engine counts in: counters and histograms written by one thread at a time and
// read by any (TransferEngine::metrics()), without locks and without read-modify-write
// instructions on the hot path.
//
// A group's counters are written only by the thread that holds the group's progress ownership
// (GroupWorker::own()): ownership passes with acquire/release, so a plain relaxed load + store
// never loses an increment, and a reader on another thread sees every value some time after it
// was written. Counters written by several threads at once (request outcomes, which an
// abandoned group's submitters deliver too) use SharedCounter's fetch_add.
#pragma once

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>

#include "fabric_lib/metrics.h"

namespace fabric_lib::detail {

class OwnedCounter {
 public:
  void add(uint64_t n = 1) { v_.store(v_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed); }
  void sub(uint64_t n = 1) { v_.store(v_.load(std::memory_order_relaxed) - n, std::memory_order_relaxed); }
  void set(uint64_t v) { v_.store(v, std::memory_order_relaxed); }
  uint64_t get() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> v_{0};
};

class SharedCounter {
 public:
  void add(uint64_t n = 1) { v_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t get() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> v_{0};
};

// The bucket of a latency (LatencyHistogram's: bucket i holds <= 2^i us).
inline size_t latency_bucket(uint64_t ns) {
  if (ns <= 1000) return 0;
  const size_t b = static_cast<size_t>(std::bit_width((ns - 1) / 1000));
  return b < LatencyHistogram::kBuckets - 1 ? b : LatencyHistogram::kBuckets - 1;
}

// A LatencyHistogram whose cells are Counter (OwnedCounter or SharedCounter).
template <typename Counter>
class HistogramCells {
 public:
  // `samples` equal samples of `ns` (WRs that finished together).
  void record(int64_t ns, uint64_t samples = 1) {
    const uint64_t v = ns > 0 ? static_cast<uint64_t>(ns) : 0;
    buckets_[latency_bucket(v)].add(samples);
    sum_ns_.add(v * samples);
  }
  void read_into(LatencyHistogram& out) const {
    for (size_t i = 0; i < LatencyHistogram::kBuckets; ++i) {
      const uint64_t n = buckets_[i].get();
      out.buckets[i] += n;
      out.count += n;
    }
    out.sum_seconds += static_cast<double>(sum_ns_.get()) * 1e-9;
  }

 private:
  Counter buckets_[LatencyHistogram::kBuckets];
  Counter sum_ns_;
};

using OwnedHistogram = HistogramCells<OwnedCounter>;
using SharedHistogram = HistogramCells<SharedCounter>;

inline constexpr size_t kNumErrorCodes = static_cast<size_t>(ErrorCode::kInternal) + 1;

}  // namespace fabric_lib::detail

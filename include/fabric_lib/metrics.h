// Metrics: what TransferEngine::metrics() returns — a snapshot of the engine's counters, gauges
// and latency histograms, per operation type, per domain and per peer — and MetricsRegistry,
// where applications add their own counters, gauges and histograms. The same values are served
// in the Prometheus text format when TransferEngineBuilder::metrics_endpoint() is set; every
// metric and its Prometheus name are listed in docs/operations.md.
//
// The engine's workers own their counters and update them without locks or shared writes; a
// snapshot reads them while the workers run (each value on its own, so values that move together
// — posted and completed — may be a few operations apart in one snapshot).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fabric_lib/domain_address.h"
#include "fabric_lib/health.h"
#include "fabric_lib/status.h"

namespace fabric_lib {

// The call a request was submitted through (prepared forms count as their plain form).
enum class OpType : uint8_t {
  kWrite,       // submit_write
  kPagedWrite,  // submit_paged_writes, submit_prepared(PreparedPagedWrites)
  kScatter,     // submit_scatter, submit_prepared(PreparedScatter)
  kBarrier,     // submit_barrier
  kImm,         // submit_imm
  kSend,        // submit_send (both forms)
};
inline constexpr size_t kNumOpTypes = 6;
// "write", "paged_write", "scatter", "barrier", "imm", "send".
std::string_view op_type_name(OpType op);

// A latency distribution over fixed power-of-two buckets: bucket i (i < kBuckets - 1) counts the
// samples of at most 2^i microseconds (1 us, 2 us, ... 2^23 us = 8.4 s), the last one the rest.
struct LatencyHistogram {
  static constexpr size_t kBuckets = 25;
  // Upper bound of bucket i in seconds; +infinity for the last.
  static double upper_bound_seconds(size_t i);

  std::array<uint64_t, kBuckets> buckets{};  // samples per bucket (not cumulative)
  uint64_t count = 0;                        // the sum of buckets
  double sum_seconds = 0;

  // The q-quantile (q in [0, 1]) interpolated linearly inside its bucket (the last bucket's
  // samples are placed at its lower bound); 0 without samples.
  double quantile(double q) const;
  LatencyHistogram& operator+=(const LatencyHistogram& other);
};

// How many things ended with one error code.
struct ErrorCount {
  ErrorCode code = ErrorCode::kOk;
  uint64_t count = 0;
};

// One operation type, all groups together.
struct OpMetrics {
  OpType op = OpType::kWrite;
  uint64_t requests_submitted = 0;       // accepted by a submit call
  uint64_t requests_completed = 0;       // delivered Ok
  std::vector<ErrorCount> requests_failed;  // delivered with an error, by code (codes seen only)
  uint64_t wrs_posted = 0;               // work requests handed to a domain
  uint64_t wrs_completed = 0;            // ... that completed Ok
  // ... that failed, by code: an error completion, or abandoned when their path failed.
  std::vector<ErrorCount> wrs_failed;
  LatencyHistogram request_latency;      // submit call -> completion delivered (metrics on)
  LatencyHistogram submit_to_post;       // submit call -> first WR posted (metrics on; 0 when posted within the submit call)

  uint64_t requests_failed_total() const;
  uint64_t wrs_failed_total() const;
};

// One domain (NIC) of one group.
struct DomainMetrics {
  size_t group = 0;
  size_t domain = 0;
  std::string name;               // the interface / domain name the domain was opened on
  uint64_t wrs_posted = 0;
  uint64_t wrs_completed = 0;     // Ok
  uint64_t wrs_failed = 0;        // error completions and WRs abandoned by a failed path
  uint64_t bytes_written = 0;     // payload of WRs (writes and sends) that completed Ok
  uint64_t imms_received = 0;     // immediates that arrived on it
  uint64_t inflight = 0;          // WRs the provider holds now (abandoned ones included)
};

// One peer (a remote group, named by its domain-0 address) of one local group. Collected while
// metrics are on (TransferEngineBuilder::metrics()).
struct PeerMetrics {
  size_t group = 0;
  DomainAddress address;
  PeerHealth health = PeerHealth::kHealthy;
  uint32_t paths = 0;             // domains of the group
  uint32_t paths_up = 0;
  uint64_t wrs_posted = 0;
  uint64_t wrs_completed = 0;
  uint64_t wrs_failed = 0;
  uint64_t bytes_written = 0;     // payload of WRs to it that completed Ok
  uint64_t inflight = 0;          // WRs to it the engine waits for now
  uint64_t path_failures = 0;     // path went down
  uint64_t path_recoveries = 0;   // path came back (liveness probe)
  uint64_t times_unreachable = 0;  // the peer became unreachable
  uint64_t retries = 0;           // an unreachable peer was tried afresh
  LatencyHistogram wr_latency;    // WR posted -> its completion polled
};

// A metric an application registered (MetricsRegistry), as read by the snapshot.
enum class MetricKind : uint8_t { kCounter, kGauge, kHistogram };
using MetricLabels = std::vector<std::pair<std::string, std::string>>;
struct AppMetric {
  std::string name;
  std::string help;
  MetricKind kind = MetricKind::kCounter;
  MetricLabels labels;
  double value = 0;               // counters and gauges
  LatencyHistogram histogram;     // histograms
};

struct Metrics {
  bool detailed = false;              // metrics were on: latency histograms and peers are filled
  std::vector<OpMetrics> ops;         // indexed by OpType
  std::vector<DomainMetrics> domains;  // group-major
  std::vector<PeerMetrics> peers;
  uint64_t messages_received = 0;     // two-sided receives
  uint64_t deadlines_exceeded = 0;    // requests ended by their deadline
  uint64_t path_failures = 0;         // all peers together
  uint64_t path_recoveries = 0;
  uint64_t peers_unreachable = 0;     // times a peer became unreachable
  uint64_t peer_retries = 0;
  uint64_t stalls_detected = 0;       // paths failed by stall detection (stall_timeout)
  uint64_t probe_failures = 0;        // paths failed by the liveness probe
  uint64_t groups_abandoned = 0;      // watchdog: a group's worker stuck inside the provider
  std::vector<AppMetric> app;         // MetricsRegistry, in registration order

  const OpMetrics& op(OpType t) const { return ops[static_cast<size_t>(t)]; }
  uint64_t bytes_written() const;     // over every domain
  uint64_t imms_received() const;
};

// --- application metrics -------------------------------------------------------------------
// Handles to one registered series. Copies share it; any thread may update it (relaxed
// atomics). A default-constructed handle belongs to no registry and ignores updates.
class MetricCounter {
 public:
  MetricCounter() = default;
  void add(uint64_t n = 1) {
    if (cell_) cell_->fetch_add(n, std::memory_order_relaxed);
  }
  uint64_t value() const { return cell_ ? cell_->load(std::memory_order_relaxed) : 0; }

 private:
  friend class MetricsRegistry;
  std::shared_ptr<std::atomic<uint64_t>> cell_;
};

class MetricGauge {
 public:
  MetricGauge() = default;
  void set(double v) {
    if (cell_) cell_->store(v, std::memory_order_relaxed);
  }
  void add(double d);
  double value() const { return cell_ ? cell_->load(std::memory_order_relaxed) : 0; }

 private:
  friend class MetricsRegistry;
  std::shared_ptr<std::atomic<double>> cell_;
};

class MetricHistogram {
 public:
  struct Cells;  // defined by the library
  MetricHistogram() = default;
  void observe(std::chrono::nanoseconds latency);
  void observe_seconds(double seconds) {
    observe(std::chrono::nanoseconds(static_cast<int64_t>(seconds * 1e9)));
  }

 private:
  friend class MetricsRegistry;
  std::shared_ptr<Cells> cells_;
};

// Where an application adds its metrics (TransferEngine::metrics_registry()). Names follow the
// Prometheus rules ([a-zA-Z_:][a-zA-Z0-9_:]*; counters should end in _total, histograms of
// seconds in _seconds; docs/operations.md); label names [a-zA-Z_][a-zA-Z0-9_]*, not starting
// with "__". Registering a name and label set again returns the same series; one name keeps one
// kind, one help text and one set of label names. Errors: InvalidArgument.
class MetricsRegistry {
 public:
  MetricsRegistry();
  ~MetricsRegistry();
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  Result<MetricCounter> counter(const std::string& name, const std::string& help, MetricLabels labels = {});
  Result<MetricGauge> gauge(const std::string& name, const std::string& help, MetricLabels labels = {});
  // Latency in seconds over LatencyHistogram's buckets.
  Result<MetricHistogram> histogram(const std::string& name, const std::string& help, MetricLabels labels = {});

  // Every registered series, in registration order.
  std::vector<AppMetric> snapshot() const;

  struct State;  // defined by the library

 private:
  std::unique_ptr<State> state_;
};

}  // namespace fabric_lib

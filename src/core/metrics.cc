// The public metrics value types (fabric_lib/metrics.h) and the applications' MetricsRegistry.
#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <mutex>

#include "core/metric_cells.h"
#include "fabric_lib/metrics.h"

namespace fabric_lib {

std::string_view op_type_name(OpType op) {
  switch (op) {
    case OpType::kWrite: return "write";
    case OpType::kPagedWrite: return "paged_write";
    case OpType::kScatter: return "scatter";
    case OpType::kBarrier: return "barrier";
    case OpType::kImm: return "imm";
    case OpType::kSend: return "send";
  }
  return "unknown";
}

double LatencyHistogram::upper_bound_seconds(size_t i) {
  if (i + 1 >= kBuckets) return std::numeric_limits<double>::infinity();
  return std::ldexp(1e-6, static_cast<int>(i));
}

double LatencyHistogram::quantile(double q) const {
  if (count == 0) return 0;
  q = std::clamp(q, 0.0, 1.0);
  const double rank = q * static_cast<double>(count);
  uint64_t below = 0;
  for (size_t i = 0; i < kBuckets; ++i) {
    if (buckets[i] == 0) continue;
    const double lower = i == 0 ? 0 : upper_bound_seconds(i - 1);
    if (i + 1 == kBuckets) return lower;
    if (rank <= static_cast<double>(below + buckets[i])) {
      const double frac = (rank - static_cast<double>(below)) / static_cast<double>(buckets[i]);
      return lower + frac * (upper_bound_seconds(i) - lower);
    }
    below += buckets[i];
  }
  return upper_bound_seconds(kBuckets - 2);
}

LatencyHistogram& LatencyHistogram::operator+=(const LatencyHistogram& other) {
  for (size_t i = 0; i < kBuckets; ++i) buckets[i] += other.buckets[i];
  count += other.count;
  sum_seconds += other.sum_seconds;
  return *this;
}

uint64_t OpMetrics::requests_failed_total() const {
  uint64_t n = 0;
  for (const ErrorCount& e : requests_failed) n += e.count;
  return n;
}

uint64_t OpMetrics::wrs_failed_total() const {
  uint64_t n = 0;
  for (const ErrorCount& e : wrs_failed) n += e.count;
  return n;
}

uint64_t Metrics::bytes_written() const {
  uint64_t n = 0;
  for (const DomainMetrics& d : domains) n += d.bytes_written;
  return n;
}

uint64_t Metrics::imms_received() const {
  uint64_t n = 0;
  for (const DomainMetrics& d : domains) n += d.imms_received;
  return n;
}

void MetricGauge::add(double d) {
  if (!cell_) return;
  double v = cell_->load(std::memory_order_relaxed);
  while (!cell_->compare_exchange_weak(v, v + d, std::memory_order_relaxed)) {
  }
}

struct MetricHistogram::Cells {
  detail::SharedHistogram cells;
};

void MetricHistogram::observe(std::chrono::nanoseconds latency) {
  if (cells_) cells_->cells.record(latency.count());
}

// --- MetricsRegistry ---------------------------------------------------------------------------

struct MetricsRegistry::State {
  struct Series {
    std::string name;
    std::string help;
    MetricKind kind;
    MetricLabels labels;
    std::shared_ptr<std::atomic<uint64_t>> counter;
    std::shared_ptr<std::atomic<double>> gauge;
    std::shared_ptr<MetricHistogram::Cells> histogram;
  };
  mutable std::mutex mu;
  std::deque<Series> series;  // deque: a Series stays where it is while others are added

  // The series of (name, labels), made if new; InvalidArgument when it clashes with another.
  Result<Series*> find_or_add(const std::string& name, const std::string& help, MetricKind kind,
                              MetricLabels labels);
};

namespace {

bool valid_metric_name(const std::string& name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

bool valid_label_name(const std::string& name) {
  if (name.empty() || name.rfind("__", 0) == 0) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

// Names the exposition derives from a histogram's name, and the label it adds.
bool reserved_label(MetricKind kind, const std::string& name) { return kind == MetricKind::kHistogram && name == "le"; }

}  // namespace

Result<MetricsRegistry::State::Series*> MetricsRegistry::State::find_or_add(const std::string& name,
                                                                            const std::string& help, MetricKind kind,
                                                                            MetricLabels labels) {
  if (!valid_metric_name(name)) return invalid_argument("metric name '" + name + "' is not a Prometheus name");
  for (size_t i = 0; i < labels.size(); ++i) {
    if (!valid_label_name(labels[i].first) || reserved_label(kind, labels[i].first)) {
      return invalid_argument("metric " + name + ": label name '" + labels[i].first + "' is not allowed");
    }
    for (size_t j = 0; j < i; ++j) {
      if (labels[j].first == labels[i].first) return invalid_argument("metric " + name + ": label '" + labels[i].first + "' given twice");
    }
  }
  std::lock_guard lock(mu);
  for (Series& s : series) {
    if (s.name != name) continue;
    if (s.kind != kind || s.help != help) {
      return invalid_argument("metric " + name + " is already registered with another kind or help text");
    }
    bool same_names = s.labels.size() == labels.size();
    for (size_t i = 0; same_names && i < labels.size(); ++i) same_names = s.labels[i].first == labels[i].first;
    if (!same_names) return invalid_argument("metric " + name + " is already registered with other label names");
    if (s.labels == labels) return &s;
  }
  Series s;
  s.name = name;
  s.help = help;
  s.kind = kind;
  s.labels = std::move(labels);
  switch (kind) {
    case MetricKind::kCounter: s.counter = std::make_shared<std::atomic<uint64_t>>(0); break;
    case MetricKind::kGauge: s.gauge = std::make_shared<std::atomic<double>>(0); break;
    case MetricKind::kHistogram: s.histogram = std::make_shared<MetricHistogram::Cells>(); break;
  }
  series.push_back(std::move(s));
  return &series.back();
}

MetricsRegistry::MetricsRegistry() : state_(std::make_unique<State>()) {}
MetricsRegistry::~MetricsRegistry() = default;

Result<MetricCounter> MetricsRegistry::counter(const std::string& name, const std::string& help, MetricLabels labels) {
  Result<State::Series*> s = state_->find_or_add(name, help, MetricKind::kCounter, std::move(labels));
  if (!s.ok()) return s.status();
  MetricCounter c;
  c.cell_ = (*s)->counter;
  return c;
}

Result<MetricGauge> MetricsRegistry::gauge(const std::string& name, const std::string& help, MetricLabels labels) {
  Result<State::Series*> s = state_->find_or_add(name, help, MetricKind::kGauge, std::move(labels));
  if (!s.ok()) return s.status();
  MetricGauge g;
  g.cell_ = (*s)->gauge;
  return g;
}

Result<MetricHistogram> MetricsRegistry::histogram(const std::string& name, const std::string& help,
                                                   MetricLabels labels) {
  Result<State::Series*> s = state_->find_or_add(name, help, MetricKind::kHistogram, std::move(labels));
  if (!s.ok()) return s.status();
  MetricHistogram h;
  h.cells_ = (*s)->histogram;
  return h;
}

std::vector<AppMetric> MetricsRegistry::snapshot() const {
  std::lock_guard lock(state_->mu);
  std::vector<AppMetric> out;
  out.reserve(state_->series.size());
  for (const State::Series& s : state_->series) {
    AppMetric m;
    m.name = s.name;
    m.help = s.help;
    m.kind = s.kind;
    m.labels = s.labels;
    if (s.counter) m.value = static_cast<double>(s.counter->load(std::memory_order_relaxed));
    if (s.gauge) m.value = s.gauge->load(std::memory_order_relaxed);
    if (s.histogram) s.histogram->cells.read_into(m.histogram);
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace fabric_lib

#include "exporter/metric_families.h"

#include <initializer_list>
#include <string>
#include <utility>

namespace fabric_lib::exporter {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using Labels = std::vector<ClientMetric::Label>;

MetricFamily make_family(std::string name, std::string help, MetricType type) {
  MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = type;
  return f;
}

void push(std::vector<MetricFamily>& out, std::initializer_list<MetricFamily*> families) {
  for (MetricFamily* f : families) out.push_back(std::move(*f));
}

void add_value(MetricFamily& f, Labels labels, double value) {
  ClientMetric& m = f.metric.emplace_back();
  m.label = std::move(labels);
  if (f.type == MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
}

void add_histogram(MetricFamily& f, Labels labels, const LatencyHistogram& h) {
  ClientMetric& m = f.metric.emplace_back();
  m.label = std::move(labels);
  m.histogram.sample_count = h.count;
  m.histogram.sample_sum = h.sum_seconds;
  uint64_t cumulative = 0;
  for (size_t i = 0; i < LatencyHistogram::kBuckets; ++i) {
    cumulative += h.buckets[i];
    m.histogram.bucket.push_back({cumulative, LatencyHistogram::upper_bound_seconds(i)});
  }
}

std::string op_name(size_t op) { return std::string(op_type_name(static_cast<OpType>(op))); }
std::string code_name(ErrorCode code) { return std::string(error_code_name(code)); }

Labels domain_labels(const DomainMetrics& d) {
  return {{"group", std::to_string(d.group)}, {"domain", std::to_string(d.domain)}, {"interface", d.name}};
}
Labels peer_labels(const PeerMetrics& p) { return {{"group", std::to_string(p.group)}, {"peer", p.address.to_hex()}}; }

void add_op_families(std::vector<MetricFamily>& out, const Metrics& m) {
  MetricFamily submitted = make_family("fabric_lib_requests_submitted_total",
                                       "Requests accepted by a submit call, by operation type.", MetricType::Counter);
  MetricFamily completed = make_family("fabric_lib_requests_completed_total",
                                       "Requests whose completion was delivered Ok.", MetricType::Counter);
  MetricFamily failed = make_family("fabric_lib_requests_failed_total",
                                    "Requests whose completion was delivered with an error, by error code.",
                                    MetricType::Counter);
  MetricFamily wrs_posted = make_family("fabric_lib_wrs_posted_total",
                                        "Work requests handed to a domain, by the operation they belong to.",
                                        MetricType::Counter);
  MetricFamily wrs_completed =
      make_family("fabric_lib_wrs_completed_total", "Work requests that completed Ok.", MetricType::Counter);
  MetricFamily wrs_failed = make_family("fabric_lib_wrs_failed_total",
                                        "Work requests that completed with an error or were abandoned by a failed path.",
                                        MetricType::Counter);
  for (size_t o = 0; o < m.ops.size(); ++o) {
    const OpMetrics& op = m.ops[o];
    const std::string name = op_name(o);
    add_value(submitted, {{"op", name}}, static_cast<double>(op.requests_submitted));
    add_value(completed, {{"op", name}}, static_cast<double>(op.requests_completed));
    for (const ErrorCount& e : op.requests_failed) add_value(failed, {{"op", name}, {"code", code_name(e.code)}}, static_cast<double>(e.count));
    add_value(wrs_posted, {{"op", name}}, static_cast<double>(op.wrs_posted));
    add_value(wrs_completed, {{"op", name}}, static_cast<double>(op.wrs_completed));
    for (const ErrorCount& e : op.wrs_failed) add_value(wrs_failed, {{"op", name}, {"code", code_name(e.code)}}, static_cast<double>(e.count));
  }
  push(out, {&submitted, &completed, &failed, &wrs_posted, &wrs_completed, &wrs_failed});
  if (!m.detailed) return;
  MetricFamily latency = make_family("fabric_lib_request_latency_seconds",
                                     "Time from a submit call to its completion being delivered.", MetricType::Histogram);
  MetricFamily to_post = make_family("fabric_lib_submit_to_post_seconds",
                                     "Time from a submit call to its first work request handed to a domain.",
                                     MetricType::Histogram);
  for (size_t o = 0; o < m.ops.size(); ++o) {
    add_histogram(latency, {{"op", op_name(o)}}, m.ops[o].request_latency);
    add_histogram(to_post, {{"op", op_name(o)}}, m.ops[o].submit_to_post);
  }
  push(out, {&latency, &to_post});
}

void add_domain_families(std::vector<MetricFamily>& out, const Metrics& m) {
  struct Field {
    const char* name;
    const char* help;
    MetricType type;
    uint64_t DomainMetrics::*value;
  };
  static const Field kFields[] = {
      {"fabric_lib_domain_wrs_posted_total", "Work requests posted on the domain.", MetricType::Counter, &DomainMetrics::wrs_posted},
      {"fabric_lib_domain_wrs_completed_total", "Work requests on the domain that completed Ok.", MetricType::Counter,
       &DomainMetrics::wrs_completed},
      {"fabric_lib_domain_wrs_failed_total", "Work requests on the domain that failed or were abandoned.",
       MetricType::Counter, &DomainMetrics::wrs_failed},
      {"fabric_lib_domain_bytes_written_total", "Payload bytes of work requests on the domain that completed Ok.",
       MetricType::Counter, &DomainMetrics::bytes_written},
      {"fabric_lib_domain_imms_received_total", "Immediate values that arrived on the domain.", MetricType::Counter,
       &DomainMetrics::imms_received},
      {"fabric_lib_domain_inflight_wrs", "Work requests the domain's provider holds now.", MetricType::Gauge,
       &DomainMetrics::inflight},
  };
  for (const Field& field : kFields) {
    MetricFamily f = make_family(field.name, field.help, field.type);
    for (const DomainMetrics& d : m.domains) add_value(f, domain_labels(d), static_cast<double>(d.*field.value));
    out.push_back(std::move(f));
  }
}

void add_peer_families(std::vector<MetricFamily>& out, const Metrics& m) {
  if (!m.detailed) return;
  struct Field {
    const char* name;
    const char* help;
    MetricType type;
    uint64_t PeerMetrics::*value;
  };
  static const Field kFields[] = {
      {"fabric_lib_peer_bytes_written_total", "Payload bytes of work requests to the peer that completed Ok.",
       MetricType::Counter, &PeerMetrics::bytes_written},
      {"fabric_lib_peer_wrs_posted_total", "Work requests posted to the peer.", MetricType::Counter, &PeerMetrics::wrs_posted},
      {"fabric_lib_peer_wrs_completed_total", "Work requests to the peer that completed Ok.", MetricType::Counter,
       &PeerMetrics::wrs_completed},
      {"fabric_lib_peer_wrs_failed_total", "Work requests to the peer that failed or were abandoned.", MetricType::Counter,
       &PeerMetrics::wrs_failed},
      {"fabric_lib_peer_inflight_wrs", "Work requests to the peer the engine waits for now.", MetricType::Gauge,
       &PeerMetrics::inflight},
      {"fabric_lib_peer_path_failures_total", "Paths (local domain to the peer) that went down.", MetricType::Counter,
       &PeerMetrics::path_failures},
      {"fabric_lib_peer_path_recoveries_total", "Paths to the peer that came back.", MetricType::Counter,
       &PeerMetrics::path_recoveries},
      {"fabric_lib_peer_unreachable_total", "Times the peer became unreachable.", MetricType::Counter,
       &PeerMetrics::times_unreachable},
      {"fabric_lib_peer_retries_total", "Times an unreachable peer was tried afresh.", MetricType::Counter,
       &PeerMetrics::retries},
  };
  for (const Field& field : kFields) {
    MetricFamily f = make_family(field.name, field.help, field.type);
    for (const PeerMetrics& p : m.peers) add_value(f, peer_labels(p), static_cast<double>(p.*field.value));
    out.push_back(std::move(f));
  }
  MetricFamily health = make_family("fabric_lib_peer_health",
                                    "Health of the peer: 0 healthy, 1 degraded (some paths down), 2 unreachable.",
                                    MetricType::Gauge);
  MetricFamily paths_up = make_family("fabric_lib_peer_paths_up", "Paths to the peer that work.", MetricType::Gauge);
  MetricFamily latency = make_family("fabric_lib_peer_wr_latency_seconds",
                                     "Time from a work request to the peer being posted to its completion.",
                                     MetricType::Histogram);
  for (const PeerMetrics& p : m.peers) {
    add_value(health, peer_labels(p), static_cast<double>(static_cast<int>(p.health)));
    add_value(paths_up, peer_labels(p), static_cast<double>(p.paths_up));
    add_histogram(latency, peer_labels(p), p.wr_latency);
  }
  push(out, {&health, &paths_up, &latency});
}

void add_event_families(std::vector<MetricFamily>& out, const Metrics& m) {
  MetricFamily events = make_family("fabric_lib_health_events_total",
                                    "Path and peer health transitions and what detected them.", MetricType::Counter);
  const std::pair<const char*, uint64_t> kEvents[] = {
      {"path_failed", m.path_failures},       {"path_recovered", m.path_recoveries},
      {"peer_unreachable", m.peers_unreachable}, {"peer_retried", m.peer_retries},
      {"stall_detected", m.stalls_detected},  {"probe_failed", m.probe_failures},
  };
  for (const auto& [name, value] : kEvents) add_value(events, {{"event", name}}, static_cast<double>(value));
  MetricFamily deadlines = make_family("fabric_lib_deadlines_exceeded_total", "Requests ended by their deadline.",
                                       MetricType::Counter);
  add_value(deadlines, {}, static_cast<double>(m.deadlines_exceeded));
  MetricFamily abandoned = make_family("fabric_lib_watchdog_groups_abandoned_total",
                                       "Groups whose worker the watchdog gave up on (stuck inside a provider call).",
                                       MetricType::Counter);
  add_value(abandoned, {}, static_cast<double>(m.groups_abandoned));
  MetricFamily messages = make_family("fabric_lib_messages_received_total", "Two-sided messages received.",
                                      MetricType::Counter);
  add_value(messages, {}, static_cast<double>(m.messages_received));
  push(out, {&events, &deadlines, &abandoned, &messages});
}

// The applications' series, one family per name (the registry keeps one kind and help per name).
// A name the engine uses itself is left out: two families of one name are not valid exposition.
void add_app_families(std::vector<MetricFamily>& out, const Metrics& m) {
  const size_t engine_families = out.size();
  for (const AppMetric& a : m.app) {
    bool engine_name = false;
    for (size_t i = 0; i < engine_families; ++i) engine_name |= out[i].name == a.name;
    if (engine_name) continue;
    MetricFamily* family = nullptr;
    for (size_t i = engine_families; i < out.size(); ++i) {
      if (out[i].name == a.name) family = &out[i];
    }
    if (!family) {
      const MetricType type = a.kind == MetricKind::kCounter ? MetricType::Counter
                              : a.kind == MetricKind::kGauge ? MetricType::Gauge
                                                             : MetricType::Histogram;
      out.push_back(make_family(a.name, a.help, type));
      family = &out.back();
    }
    Labels labels;
    for (const auto& [name, value] : a.labels) labels.push_back({name, value});
    if (a.kind == MetricKind::kHistogram) {
      add_histogram(*family, std::move(labels), a.histogram);
    } else {
      add_value(*family, std::move(labels), a.value);
    }
  }
}

}  // namespace

std::vector<MetricFamily> metric_families(const Metrics& metrics) {
  std::vector<MetricFamily> out;
  add_op_families(out, metrics);
  add_domain_families(out, metrics);
  add_peer_families(out, metrics);
  add_event_families(out, metrics);
  add_app_families(out, metrics);
  return out;
}

}  // namespace fabric_lib::exporter

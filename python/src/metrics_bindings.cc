#include "metrics_bindings.h"

#include <string>

namespace fabric_lib::python {
namespace {

py::dict histogram_dict(const LatencyHistogram& h) {
  py::dict d;
  d["count"] = h.count;
  d["sum_seconds"] = h.sum_seconds;
  py::list buckets;
  for (size_t i = 0; i < LatencyHistogram::kBuckets; ++i) {
    buckets.append(py::make_tuple(LatencyHistogram::upper_bound_seconds(i), h.buckets[i]));
  }
  d["buckets"] = buckets;
  d["p50"] = h.quantile(0.5);
  d["p90"] = h.quantile(0.9);
  d["p99"] = h.quantile(0.99);
  return d;
}

py::dict codes_dict(const std::vector<ErrorCount>& codes) {
  py::dict d;
  for (const ErrorCount& e : codes) d[py::str(std::string(error_code_name(e.code)))] = e.count;
  return d;
}

const char* health_name(PeerHealth h) {
  switch (h) {
    case PeerHealth::kHealthy: return "healthy";
    case PeerHealth::kDegraded: return "degraded";
    case PeerHealth::kUnreachable: return "unreachable";
  }
  return "unknown";
}

const char* kind_name(MetricKind k) {
  switch (k) {
    case MetricKind::kCounter: return "counter";
    case MetricKind::kGauge: return "gauge";
    case MetricKind::kHistogram: return "histogram";
  }
  return "unknown";
}

}  // namespace

py::dict metrics_dict(const Metrics& m) {
  py::dict d;
  d["detailed"] = m.detailed;
  py::dict ops;
  for (const OpMetrics& op : m.ops) {
    py::dict o;
    o["requests_submitted"] = op.requests_submitted;
    o["requests_completed"] = op.requests_completed;
    o["requests_failed"] = codes_dict(op.requests_failed);
    o["wrs_posted"] = op.wrs_posted;
    o["wrs_completed"] = op.wrs_completed;
    o["wrs_failed"] = codes_dict(op.wrs_failed);
    o["request_latency"] = histogram_dict(op.request_latency);
    o["submit_to_post"] = histogram_dict(op.submit_to_post);
    ops[py::str(std::string(op_type_name(op.op)))] = o;
  }
  d["ops"] = ops;
  py::list domains;
  for (const DomainMetrics& dm : m.domains) {
    py::dict x;
    x["group"] = dm.group;
    x["domain"] = dm.domain;
    x["name"] = dm.name;
    x["wrs_posted"] = dm.wrs_posted;
    x["wrs_completed"] = dm.wrs_completed;
    x["wrs_failed"] = dm.wrs_failed;
    x["bytes_written"] = dm.bytes_written;
    x["imms_received"] = dm.imms_received;
    x["inflight"] = dm.inflight;
    domains.append(x);
  }
  d["domains"] = domains;
  py::list peers;
  for (const PeerMetrics& p : m.peers) {
    py::dict x;
    x["group"] = p.group;
    x["address"] = p.address.to_hex();
    x["health"] = health_name(p.health);
    x["paths"] = p.paths;
    x["paths_up"] = p.paths_up;
    x["wrs_posted"] = p.wrs_posted;
    x["wrs_completed"] = p.wrs_completed;
    x["wrs_failed"] = p.wrs_failed;
    x["bytes_written"] = p.bytes_written;
    x["inflight"] = p.inflight;
    x["path_failures"] = p.path_failures;
    x["path_recoveries"] = p.path_recoveries;
    x["times_unreachable"] = p.times_unreachable;
    x["retries"] = p.retries;
    x["wr_latency"] = histogram_dict(p.wr_latency);
    peers.append(x);
  }
  d["peers"] = peers;
  d["messages_received"] = m.messages_received;
  d["deadlines_exceeded"] = m.deadlines_exceeded;
  d["path_failures"] = m.path_failures;
  d["path_recoveries"] = m.path_recoveries;
  d["peers_unreachable"] = m.peers_unreachable;
  d["peer_retries"] = m.peer_retries;
  d["stalls_detected"] = m.stalls_detected;
  d["probe_failures"] = m.probe_failures;
  d["groups_abandoned"] = m.groups_abandoned;
  d["bytes_written"] = m.bytes_written();
  d["imms_received"] = m.imms_received();
  py::list app;
  for (const AppMetric& a : m.app) {
    py::dict x;
    x["name"] = a.name;
    x["help"] = a.help;
    x["kind"] = kind_name(a.kind);
    py::dict labels;
    for (const auto& [k, v] : a.labels) labels[py::str(k)] = v;
    x["labels"] = labels;
    if (a.kind == MetricKind::kHistogram) {
      x["histogram"] = histogram_dict(a.histogram);
    } else {
      x["value"] = a.value;
    }
    app.append(x);
  }
  d["app"] = app;
  return d;
}

}  // namespace fabric_lib::python

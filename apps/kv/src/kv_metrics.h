// The KV app's metrics on the engine's MetricsRegistry (public API): requests by the state they
// reached, per role — fabric_lib_kv_requests_total{role="decoder"|"prefiller",
// state="started"|"succeeded"|"failed"}. Requests in flight = started - succeeded - failed.
#pragma once

#include "fabric_lib/fabric_lib.h"

namespace fabric_lib::kv {

struct KvStateMetrics {
  MetricCounter started, succeeded, failed;

  // The names are constants of valid form, so registration cannot fail; a handle that did would
  // stay empty and count nothing.
  static KvStateMetrics create(TransferEngine& engine, const char* role) {
    KvStateMetrics m;
    MetricsRegistry& r = engine.metrics_registry();
    const char* kName = "fabric_lib_kv_requests_total";
    const char* kHelp = "KV-cache transfer requests by the state they reached (started, succeeded, failed).";
    auto counter = [&](const char* state) {
      Result<MetricCounter> c = r.counter(kName, kHelp, {{"role", role}, {"state", state}});
      return c.ok() ? *c : MetricCounter();
    };
    m.started = counter("started");
    m.succeeded = counter("succeeded");
    m.failed = counter("failed");
    return m;
  }
};

}  // namespace fabric_lib::kv

// EngineCore: reading the counters (stats(), metrics()) while the workers run. Each group's
// WorkerMetrics is written by its progress owner and read here with relaxed loads; the requests
// submitted come from the submit gate, the watchdog's events from StatCounters.
#include "core/engine_core.h"

namespace fabric_lib::detail {

EngineStats EngineCore::stats() const {
  EngineStats s;
  s.requests_submitted = gate_.submitted();
  s.groups_abandoned = stats_.groups_abandoned.load(std::memory_order_relaxed);
  for (const auto& w : workers_) w->add_stats(s);
  return s;
}

Metrics EngineCore::metrics() const {
  Metrics m;
  m.detailed = options_.metrics;
  m.ops.resize(kNumOpTypes);
  for (size_t o = 0; o < kNumOpTypes; ++o) {
    m.ops[o].op = static_cast<OpType>(o);
    m.ops[o].requests_submitted = gate_.submitted(static_cast<OpType>(o));
  }
  for (const auto& w : workers_) w->metrics().read_into(m);
  m.groups_abandoned = stats_.groups_abandoned.load(std::memory_order_relaxed);
  m.app = app_metrics_.snapshot();
  return m;
}

}  // namespace fabric_lib::detail

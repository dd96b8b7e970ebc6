// The weight-transfer app's metrics on the engine's MetricsRegistry (public API): how long each
// trainer send() spent in each stage (StepStats), as histograms
// fabric_lib_weights_step_seconds{stage="total"|"prepare"|"watermark_wait"|"gather_wait"|
// "write_wait"|"barrier"}, and the steps by outcome, fabric_lib_weights_steps_total{outcome}.
#pragma once

#include <array>
#include <utility>

#include "fabric_lib/fabric_lib.h"
#include "fabric_lib/weights/trainer.h"

namespace fabric_lib::weights::detail {

class StepMetrics {
 public:
  StepMetrics() = default;
  explicit StepMetrics(TransferEngine& engine) {
    MetricsRegistry& r = engine.metrics_registry();
    for (size_t i = 0; i < kStages.size(); ++i) {
      Result<MetricHistogram> h = r.histogram("fabric_lib_weights_step_seconds",
                                              "Time one trainer send() spent in each stage of the pipeline.",
                                              {{"stage", kStages[i].first}});
      if (h.ok()) stages_[i] = *h;  // constant, valid names: cannot fail
    }
    for (const char* outcome : {"ok", "failed"}) {
      Result<MetricCounter> c = r.counter("fabric_lib_weights_steps_total", "Trainer send() steps by outcome.",
                                          {{"outcome", outcome}});
      if (c.ok()) (outcome[0] == 'o' ? ok_ : failed_) = *c;
    }
  }
  void record(const StepStats& s, bool ok) {
    for (size_t i = 0; i < kStages.size(); ++i) stages_[i].observe_seconds(s.*kStages[i].second);
    (ok ? ok_ : failed_).add();
  }

 private:
  static constexpr std::array<std::pair<const char*, double StepStats::*>, 6> kStages = {{
      {"total", &StepStats::total_s},
      {"prepare", &StepStats::prepare_s},
      {"watermark_wait", &StepStats::watermark_wait_s},
      {"gather_wait", &StepStats::gather_wait_s},
      {"write_wait", &StepStats::write_wait_s},
      {"barrier", &StepStats::barrier_s},
  }};
  std::array<MetricHistogram, 6> stages_;
  MetricCounter ok_, failed_;
};

}  // namespace fabric_lib::weights::detail

// The Prometheus view of a Metrics snapshot: every engine metric as a MetricFamily named by the
// Prometheus conventions (fabric_lib_..._total counters, _seconds histograms, labels op, code,
// group, domain, peer), then the applications' metrics as they registered them. The list of
// names and their meaning is docs/operations.md.
#pragma once

#include <vector>

#include <prometheus/metric_family.h>

#include "fabric_lib/metrics.h"

namespace fabric_lib::exporter {

std::vector<prometheus::MetricFamily> metric_families(const Metrics& metrics);

}  // namespace fabric_lib::exporter

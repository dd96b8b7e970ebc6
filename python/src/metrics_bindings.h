// TransferEngine.metrics() as a Python dict (the C++ Metrics snapshot, fabric_lib/metrics.h).
#pragma once

#include <pybind11/pybind11.h>

#include "fabric_lib/metrics.h"

namespace fabric_lib::python {

namespace py = pybind11;

// {"detailed", "ops": {op: {...}}, "domains": [...], "peers": [...], event counters, "app": [...]};
// latency histograms as {"count", "sum_seconds", "buckets": [(upper_bound_seconds, n), ...],
// "p50", "p90", "p99"}. MetricsDict in fabric_lib/_fabric_lib.pyi declares every key.
py::dict metrics_dict(const Metrics& m);

}  // namespace fabric_lib::python

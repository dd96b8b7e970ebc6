// Binds detect_topology() and its result types (Topology, TopologyGroup, DomainInfo, GpuInfo).
#pragma once

#include <pybind11/pybind11.h>

namespace fabric_lib::python {

namespace py = pybind11;

void bind_topology(py::module_& m);

}  // namespace fabric_lib::python

// The engine's request forms from Python: prepared paged writes and scatters (the handles and
// their value types), cancel by id, sends from and receives into registered memory, and
// repeating imm expectations. PyEngine's methods for them are in forms.cc.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>

#include "fabric_lib/fabric_lib.h"
#include "gil.h"

namespace fabric_lib::python {

namespace py = pybind11;

class PyEngine;

// A prepared paged write with the engine that made it and the keep-alive of its source buffer
// (the buffer stays alive as long as the handle does).
struct PyPreparedPagedWrites {
  PreparedPagedWrites prepared;
  uint64_t engine_serial = 0;
  PyRefPtr keepalive;
  uint64_t page_length = 0;
  uint32_t src_page_bound = 0;
  uint32_t dst_page_bound = 0;
};

// A prepared scatter, likewise.
struct PyPreparedScatter {
  PreparedScatter prepared;
  uint64_t engine_serial = 0;
  PyRefPtr keepalive;
  std::vector<PreparedScatterTarget> targets;
};

// Binds PreparedPagedWrites, PreparedScatter, PreparedScatterTarget and ScatterSlice.
void bind_form_types(py::module_& m);
// Adds the request forms' methods to TransferEngine.
void bind_forms(py::class_<PyEngine>& cls);

}  // namespace fabric_lib::python

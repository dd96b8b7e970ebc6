// The extension module fabric_lib._fabric_lib. The public package `fabric_lib` re-exports it.
#include <pybind11/pybind11.h>

#include "async_completions.h"
#include "callbacks.h"
#include "errors.h"
#include "forms.h"
#include "py_engine.h"
#include "topology_bindings.h"
#include "types.h"
#include "watcher_bindings.h"

namespace py = pybind11;

PYBIND11_MODULE(_fabric_lib, m) {
  m.doc() = "fabric-lib's C++ TransferEngine, bound with pybind11. Import `fabric_lib` instead.";
  fabric_lib::python::bind_errors(m);
  fabric_lib::python::bind_types(m);
  fabric_lib::python::bind_form_types(m);
  fabric_lib::python::bind_topology(m);
  fabric_lib::python::bind_engine(m);
  fabric_lib::python::bind_watchers(m);
  fabric_lib::python::bind_async_completions(m);
  m.def("callback_error_count", &fabric_lib::python::callback_error_count,
        "How many exceptions user callbacks have raised (and the engine logged) in this process.");
  // Engines must stop while the interpreter can still run their callbacks.
  py::module_::import("atexit").attr("register")(m.attr("_stop_all_engines"));
}

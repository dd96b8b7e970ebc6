// GPU signalling words for Python: MappedWord (alloc_mapped_word) and ScalarWatcher
// (TransferEngine.alloc_scalar_watcher, the paper's UVM watcher: a kernel writes `.ptr`, a Python
// callback runs).
#pragma once

#include <pybind11/pybind11.h>

namespace fabric_lib::python {

namespace py = pybind11;

// Binds MappedWord, ScalarWatcher and alloc_mapped_word.
void bind_watchers(py::module_& m);

}  // namespace fabric_lib::python

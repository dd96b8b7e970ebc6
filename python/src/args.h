// Argument conversions shared by the engine's bindings (py_engine.cc, forms.cc): Python values
// checked and turned into the C++ API's, raising TypeError / ValueError with the argument's name.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace fabric_lib::python {

namespace py = pybind11;

// Runs `f` with the GIL released (engine calls never need it).
template <typename F>
auto without_gil(F&& f) {
  py::gil_scoped_release nogil;
  return f();
}

// ValueError unless v >= 0.
uint64_t non_negative(int64_t v, const char* name);
// An imm value: an int in 0 .. 2**32-1 (TypeError for other types, bool included).
uint32_t imm_value(const py::object& imm, const char* name);
// None, or imm_value(imm).
std::optional<uint32_t> optional_imm(const py::object& imm);
// A PageIndices, or any iterable of ints turned into one.
std::vector<uint32_t> pages_of(const py::object& pages, const char* name);

}  // namespace fabric_lib::python

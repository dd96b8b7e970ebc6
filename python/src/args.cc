#include "args.h"

#include <string>

#include "types.h"

namespace fabric_lib::python {

uint64_t non_negative(int64_t v, const char* name) {
  if (v < 0) throw py::value_error(std::string(name) + " must be >= 0, got " + std::to_string(v));
  return static_cast<uint64_t>(v);
}

uint32_t imm_value(const py::object& imm, const char* name) {
  if (!py::isinstance<py::int_>(imm) || py::isinstance<py::bool_>(imm)) {
    throw py::type_error(std::string(name) + " must be an int, got " +
                         std::string(py::str(py::type::handle_of(imm).attr("__name__"))));
  }
  const long long v = PyLong_AsLongLong(imm.ptr());
  if ((v == -1 && PyErr_Occurred()) || v < 0 || v > 0xFFFFFFFFll) {
    PyErr_Clear();
    throw py::value_error(std::string(name) + " must be in 0 .. 2**32-1, got " + std::string(py::str(imm)));
  }
  return static_cast<uint32_t>(v);
}

std::optional<uint32_t> optional_imm(const py::object& imm) {
  if (imm.is_none()) return std::nullopt;
  return imm_value(imm, "imm_data");
}

std::vector<uint32_t> pages_of(const py::object& pages, const char* name) {
  if (py::isinstance<PyPageIndices>(pages)) return pages.cast<const PyPageIndices&>().indices;
  try {
    return py::module_::import("fabric_lib._fabric_lib").attr("PageIndices")(pages).cast<const PyPageIndices&>().indices;
  } catch (py::error_already_set& e) {
    if (e.matches(PyExc_TypeError)) {
      throw py::type_error(std::string(name) + ": expected PageIndices or an iterable of ints (" + e.what() + ")");
    }
    throw;
  }
}

}  // namespace fabric_lib::python

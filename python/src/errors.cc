#include "errors.h"

#include <cctype>
#include <string>
#include <unordered_map>

namespace fabric_lib::python {

namespace {

// Extra built-in bases and docs for the codes a Python user would catch by their built-in kind.
// Codes missing here still get a class (FabricError subclass, generic doc): the table of classes
// is derived from error_code_name(), so new C++ codes appear in Python without a change here.
struct CodeInfo {
  const char* builtin;
  const char* doc;
};
const std::unordered_map<std::string, CodeInfo>& code_info() {
  static const std::unordered_map<std::string, CodeInfo> info = {
      {"invalid_argument", {"ValueError", "A caller's argument is wrong (size, index, flag, range)."}},
      {"not_found", {"LookupError", "Unknown or already unregistered handle, unknown imm or peer."}},
      {"out_of_range", {"ValueError", "A byte range falls outside a local or remote memory region."}},
      {"already_exists", {nullptr, "Already there (e.g. a second expectation for one imm value)."}},
      {"resource_exhausted", {nullptr, "A bounded table or pool is full."}},
      {"malformed", {"ValueError", "Bytes from outside (descriptor, address) do not decode."}},
      {"unsupported", {nullptr, "The provider or this build lacks a needed capability."}},
      {"stopped", {nullptr, "The engine was stopped."}},
      {"cancelled", {nullptr, "An accepted operation ended because of stop() or remove_imm_count()."}},
      {"deadline_exceeded", {"TimeoutError", "An accepted operation passed its deadline."}},
      {"peer_unreachable", {"ConnectionError", "The remote peer failed or cannot be reached."}},
      {"domain_down", {"ConnectionError", "A domain (NIC path) carrying part of the operation failed."}},
      {"provider_error", {nullptr, "The transport (libfabric provider) reported an error."}},
      {"failed_precondition", {nullptr, "The call is not allowed now (e.g. stop() from a callback)."}},
      {"internal", {nullptr, "A bug in fabric-lib; please report it."}},
  };
  return info;
}

// "invalid_argument" -> "InvalidArgumentError"; "provider_error" -> "ProviderError".
std::string class_name_of(const std::string& code) {
  std::string out;
  bool upper = true;
  for (char c : code) {
    if (c == '_') {
      upper = true;
      continue;
    }
    out += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
    upper = false;
  }
  if (out.size() < 5 || out.compare(out.size() - 5, 5, "Error") != 0) out += "Error";
  return out;
}

// Strong references for the module's lifetime (intentionally never released).
PyObject* g_base = nullptr;
PyObject* g_classes[256] = {};

PyObject* class_for(ErrorCode code) {
  PyObject* cls = g_classes[static_cast<uint8_t>(code)];
  return cls ? cls : g_base;
}

}  // namespace

py::object error_object(const Status& status) {
  py::object cls = py::reinterpret_borrow<py::object>(class_for(status.code()));
  py::object exc = cls(status.to_string());
  exc.attr("code") = std::string(error_code_name(status.code()));
  exc.attr("message") = status.message();
  return exc;
}

void bind_errors(py::module_& m) {
  const std::string module_name = py::str(m.attr("__name__"));
  const std::string base_name = module_name + ".FabricError";
  g_base = PyErr_NewExceptionWithDoc(
      base_name.c_str(),
      "Base of every fabric-lib error. ``code`` is the error code's name (e.g. ``'not_found'``),\n"
      "``message`` the explanation; ``str(e)`` is ``'<code>: <message>'``.",
      PyExc_Exception, nullptr);
  if (g_base == nullptr) throw py::error_already_set();
  m.attr("FabricError") = py::reinterpret_borrow<py::object>(g_base);
  py::module_ builtins = py::module_::import("builtins");
  for (int value = 1; value < 256; ++value) {
    const std::string code(error_code_name(static_cast<ErrorCode>(value)));
    if (code == "unknown") break;
    auto it = code_info().find(code);
    const char* builtin = it == code_info().end() ? nullptr : it->second.builtin;
    const std::string doc = std::string(it == code_info().end() ? "A fabric-lib error." : it->second.doc) +
                            " Error code ``'" + code + "'``.";
    // Each branch as a plain py::tuple: pybind11 >= 3.0 gives make_tuple a typed result per arity.
    py::tuple bases = builtin ? py::tuple(py::make_tuple(py::handle(g_base), builtins.attr(builtin)))
                              : py::tuple(py::make_tuple(py::handle(g_base)));
    const std::string name = class_name_of(code);
    const std::string full = module_name + "." + name;
    g_classes[value] = PyErr_NewExceptionWithDoc(full.c_str(), doc.c_str(), bases.ptr(), nullptr);
    if (g_classes[value] == nullptr) throw py::error_already_set();
    py::object cls = py::reinterpret_borrow<py::object>(g_classes[value]);
    cls.attr("code") = code;
    m.attr(name.c_str()) = cls;
  }
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      py::object exc = error_object(e.status());
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
    }
  });
}

}  // namespace fabric_lib::python

#include "watcher_bindings.h"

#include <unistd.h>

#include <memory>

#include "args.h"
#include "callbacks.h"
#include "errors.h"
#include "fabric_lib/uvm_watcher.h"
#include "py_engine.h"

namespace fabric_lib::python {

namespace {

// Owns a UvmWatcher or a MappedWord. Freeing one waits for the watcher thread, which may be
// waiting for the GIL in a callback: so the GIL is released first. In a process forked from the
// creator the watcher thread does not exist: the object is leaked instead (like engines).
template <typename T>
class Owned {
 public:
  explicit Owned(T value) : value_(std::make_unique<T>(std::move(value))), pid_(getpid()) {}
  ~Owned() { close(); }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;

  const T& get() const {
    if (!value_) throw StatusError(Status(ErrorCode::kFailedPrecondition, "closed"));
    return *value_;
  }
  T& get() {
    if (!value_) throw StatusError(Status(ErrorCode::kFailedPrecondition, "closed"));
    return *value_;
  }
  bool closed() const { return !value_; }
  void close() {
    if (!value_) return;
    if (getpid() != pid_) {
      (void)value_.release();
      return;
    }
    if (PyGILState_Check()) {
      py::gil_scoped_release nogil;
      value_.reset();
    } else {
      value_.reset();
    }
  }

 private:
  std::unique_ptr<T> value_;
  int pid_;
};

using PyMappedWord = Owned<MappedWord>;
using PyScalarWatcher = Owned<UvmWatcher>;

uintptr_t address(const void* p) { return reinterpret_cast<uintptr_t>(p); }

}  // namespace

py::object PyEngine::alloc_scalar_watcher(const py::object& callback) {
  if (callback.is_none() || !PyCallable_Check(callback.ptr())) {
    throw py::type_error("alloc_scalar_watcher: callback must be callable (old_value, new_value) -> bool");
  }
  WatchCallback cb = watch_callback_of(make_ref(callback));
  auto e = engine();
  UvmWatcher w = take(without_gil([&] { return e->alloc_uvm_watcher(std::move(cb)); }));
  return py::cast(std::make_unique<PyScalarWatcher>(std::move(w)));
}

void bind_watchers(py::module_& m) {
  py::class_<PyMappedWord>(m, "MappedWord",
                           "A 64-bit word in mapped pinned host memory, initially 0: the CPU uses it through\n"
                           "``value``, CUDA kernels through the device address ``ptr`` (e.g. a GPU-visible flag).\n"
                           "Freed by ``close()`` (also on garbage collection and ``with`` exit).")
      .def_property_readonly("ptr", [](const PyMappedWord& w) { return address(w.get().device_ptr()); },
                             "Device address of the word, for kernels.")
      .def_property_readonly("host_ptr", [](const PyMappedWord& w) { return address(w.get().host_ptr()); },
                             "Host address of the word.")
      .def_property(
          "value", [](const PyMappedWord& w) { return w.get().load(); },
          [](PyMappedWord& w, uint64_t v) { w.get().store(v); }, "The word (acquire load / release store).")
      .def_property_readonly("closed", &PyMappedWord::closed, "Whether close() ran.")
      .def("close", &PyMappedWord::close, "Frees the word (no kernel may use it afterwards).")
      .def("__enter__", [](py::object self) { return self; }, "Returns itself.")
      .def("__exit__", [](PyMappedWord& w, py::args) { w.close(); }, "Calls close().");

  py::class_<PyScalarWatcher>(m, "ScalarWatcher",
                              "A word a CUDA kernel writes (at ``ptr``) and the engine's watcher thread polls,\n"
                              "calling ``callback(old_value, new_value)`` on every change it sees (fast changes are\n"
                              "coalesced). Made by TransferEngine.alloc_scalar_watcher. ``close()`` stops watching\n"
                              "and frees the word; once it returns the callback never runs again.")
      .def_property_readonly("ptr", [](const PyScalarWatcher& w) { return address(w.get().device_ptr()); },
                             "Device address of the 64-bit word the kernel writes.")
      .def_property_readonly("host_ptr", [](const PyScalarWatcher& w) { return address(w.get().host_ptr()); },
                             "Host address of the word.")
      .def_property_readonly("value", [](const PyScalarWatcher& w) { return w.get().value(); }, "The word's current value.")
      .def_property_readonly("closed", &PyScalarWatcher::closed, "Whether close() ran.")
      .def("close", &PyScalarWatcher::close, "Stops watching and frees the word.")
      .def("__enter__", [](py::object self) { return self; }, "Returns itself.")
      .def("__exit__", [](PyScalarWatcher& w, py::args) { w.close(); }, "Calls close().");

  m.def(
      "alloc_mapped_word",
      [] {
        MappedWord w = take(alloc_mapped_word());
        return std::make_unique<PyMappedWord>(std::move(w));
      },
      "Allocates a MappedWord. Raises UnsupportedError without CUDA (build or device).");
}

}  // namespace fabric_lib::python

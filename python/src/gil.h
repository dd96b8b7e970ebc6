// GIL handling for code that runs on the engine's threads (callback thread, workers, helper
// threads): taking the GIL there, and holding Python objects from C++ safely.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <utility>

namespace fabric_lib::python {

namespace py = pybind11;

// True once the interpreter is shutting down: no thread other than the main one may take the GIL
// then (PyGILState_Ensure would hang or end the thread), so Python objects are leaked instead.
bool interpreter_finalizing();

// Takes the GIL on any thread. The first time a thread that Python has never seen takes it, a
// thread state is created and kept for the life of the thread, so repeated callbacks on the
// engine's callback thread do not create and destroy one each time.
class GilGuard {
 public:
  GilGuard();
  ~GilGuard();
  GilGuard(const GilGuard&) = delete;
  GilGuard& operator=(const GilGuard&) = delete;

 private:
  PyGILState_STATE state_;
};

// A Python object owned from C++ code that may be destroyed on any thread, with or without the
// GIL: the reference is dropped under the GIL (or leaked during interpreter shutdown). Shared
// through std::shared_ptr so that std::function copies of a callback share one reference.
class PyRef {
 public:
  explicit PyRef(py::object obj) : obj_(std::move(obj)) {}
  ~PyRef();
  PyRef(const PyRef&) = delete;
  PyRef& operator=(const PyRef&) = delete;

  // Only with the GIL held.
  const py::object& get() const { return obj_; }
  bool is_none() const { return obj_.is_none(); }

 private:
  py::object obj_;
};
using PyRefPtr = std::shared_ptr<PyRef>;

// With the GIL held: wraps `obj` (None stays a PyRef holding None).
inline PyRefPtr make_ref(py::object obj) { return std::make_shared<PyRef>(std::move(obj)); }

// Marks the current thread as one that runs engine callbacks (see is_callback_thread()).
void mark_callback_thread();
// Whether the current thread has run an engine callback: stopping an engine from such a thread
// could wait for that very thread, so it is handed to a helper thread instead.
bool is_callback_thread();

}  // namespace fabric_lib::python

#include "gil.h"

namespace fabric_lib::python {

namespace {
thread_local bool t_callback_thread = false;
thread_local bool t_thread_state_pinned = false;
}  // namespace

bool interpreter_finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

GilGuard::GilGuard() {
  const bool new_thread = PyGILState_GetThisThreadState() == nullptr;
  state_ = PyGILState_Ensure();
  if (new_thread && !t_thread_state_pinned) {
    // One extra, never released Ensure keeps this thread's state alive between callbacks.
    PyGILState_Ensure();
    t_thread_state_pinned = true;
  }
}

GilGuard::~GilGuard() { PyGILState_Release(state_); }

PyRef::~PyRef() {
  if (!obj_ || !Py_IsInitialized() || interpreter_finalizing()) {
    obj_.release();  // leaked on purpose: Python is gone or going
    return;
  }
  GilGuard gil;
  obj_ = py::object();
}

void mark_callback_thread() { t_callback_thread = true; }
bool is_callback_thread() { return t_callback_thread; }

}  // namespace fabric_lib::python

#include "callbacks.h"

#include <atomic>
#include <utility>

#include "async_completions.h"
#include "errors.h"

namespace fabric_lib::python {

namespace {

std::atomic<uint64_t> g_callback_errors{0};

// With the GIL held: runs `body`, logging a Python exception it raises.
template <typename F>
void call_guarded(const char* where, F&& body) {
  try {
    body();
  } catch (py::error_already_set& e) {
    report_callback_error(where, e);
  } catch (const std::exception& e) {
    g_callback_errors.fetch_add(1, std::memory_order_relaxed);
    PyErr_SetString(PyExc_RuntimeError, e.what());
    PyErr_WriteUnraisable(nullptr);
  }
}

// Runs `body` with the GIL, logging a Python exception it raises. Nothing runs once the
// interpreter is shutting down.
template <typename F>
void run_python(const char* where, F&& body) {
  if (!Py_IsInitialized() || interpreter_finalizing()) return;
  GilGuard gil;
  call_guarded(where, std::forward<F>(body));
}

}  // namespace

bool is_async_slot(const PyRefPtr& on_done) { return on_done && py::isinstance<AsyncSlot>(on_done->get()); }

PyRefPtr callable_arg(const py::object& fn, const char* name) {
  if (!fn.is_none() && !PyCallable_Check(fn.ptr()) && !py::isinstance<AsyncSlot>(fn)) {
    throw py::type_error(std::string(name) + " must be callable or None, got " +
                         std::string(py::str(py::type::handle_of(fn).attr("__name__"))));
  }
  return make_ref(fn);
}

void report_callback_error(const std::string& where, py::error_already_set& e) {
  g_callback_errors.fetch_add(1, std::memory_order_relaxed);
  try {
    py::object logger = py::module_::import("logging").attr("getLogger")("fabric_lib");
    py::dict kwargs;
    kwargs["exc_info"] = py::make_tuple(e.type(), e.value(), e.trace());
    logger.attr("error")("exception in fabric_lib %s callback (ignored; the engine continues)", where, **kwargs);
  } catch (py::error_already_set& again) {
    // Logging itself failed (e.g. during shutdown): fall back to the interpreter's hook.
    again.restore();
    PyErr_WriteUnraisable(nullptr);
  }
}

uint64_t callback_error_count() { return g_callback_errors.load(std::memory_order_relaxed); }

std::chrono::nanoseconds seconds_arg(double seconds, const char* name) {
  if (!(seconds > 0) || seconds > 1e9) {
    throw py::value_error(std::string(name) + " must be a positive number of seconds, got " + std::to_string(seconds));
  }
  return std::chrono::nanoseconds(static_cast<int64_t>(seconds * 1e9));
}

CompletionCallback callback_of(PyRefPtr on_done, PyRefPtr on_error, PyRefPtr keep) {
  if (is_async_slot(on_done)) {  // an asyncio form's future
    const AsyncSlot& slot = on_done->get().cast<const AsyncSlot&>();
    return slot.completions->callback(slot.token, std::move(keep));
  }
  return [on_done = std::move(on_done), on_error = std::move(on_error),
          keep = std::move(keep)](const Status& status) mutable {
    if (!Py_IsInitialized() || interpreter_finalizing()) return;  // the references leak
    GilGuard gil;
    call_guarded(status.ok() ? "on_done" : "on_error", [&] {
      if (status.ok()) {
        if (on_done && !on_done->is_none()) on_done->get()();
      } else if (on_error && !on_error->is_none()) {
        on_error->get()(error_object(status));
      }
    });
    // Drop the references while this thread holds the GIL.
    on_done.reset();
    on_error.reset();
    keep.reset();
  };
}

Completion completion_of(PyRefPtr on_done, PyRefPtr on_error, PyRefPtr keep, std::optional<double> timeout) {
  const std::optional<std::chrono::nanoseconds> limit =
      timeout ? std::optional<std::chrono::nanoseconds>(seconds_arg(*timeout, "timeout")) : std::nullopt;
  // An asyncio form's slot queues the outcome for its loop: quick, no GIL, so on the thread that
  // ends the operation (one thread hop fewer than the callback thread).
  const bool slot = is_async_slot(on_done);
  CompletionCallback fn = callback_of(std::move(on_done), std::move(on_error), std::move(keep));
  Completion c = slot ? Completion::inline_callback(std::move(fn)) : Completion::callback(std::move(fn));
  if (limit) c.with_deadline(Clock::now() + *limit);
  return c;
}

RecvCallback recv_callback_of(PyRefPtr on_recv) {
  return [on_recv = std::move(on_recv)](std::span<const uint8_t> message) {
    run_python("on_recv", [&] {
      on_recv->get()(py::bytes(reinterpret_cast<const char*>(message.data()), message.size()));
    });
  };
}

RecvErrorCallback recv_error_callback_of(PyRefPtr on_error) {
  if (!on_error || on_error->is_none()) return {};
  return [on_error = std::move(on_error)](const Status& status) {
    run_python("on_error (receive)", [&] { on_error->get()(error_object(status)); });
  };
}

RecvCallback recv_into_callback_of(PyRefPtr on_recv, uintptr_t region_base, PyRefPtr keep) {
  return [on_recv = std::move(on_recv), region_base, keep = std::move(keep)](std::span<const uint8_t> message) {
    const uintptr_t offset = reinterpret_cast<uintptr_t>(message.data()) - region_base;
    run_python("on_recv", [&] { on_recv->get()(offset, message.size()); });
  };
}

RepeatingSink::Callback repeating_callback_of(PyRefPtr on_round, PyRefPtr on_end, std::function<void()> at_end) {
  return [on_round = std::move(on_round), on_end = std::move(on_end), at_end = std::move(at_end)](
             uint64_t round, const Status& status) {
    if (status.ok()) {
      run_python("on_round", [&] {
        if (!on_round->is_none()) on_round->get()(round);
      });
      return;
    }
    if (at_end) at_end();
    run_python("on_end", [&] {
      if (on_end && !on_end->is_none()) on_end->get()(error_object(status), round);
    });
  };
}

ImmCounter::Observer observer_of(PyRefPtr cb) {
  return [cb = std::move(cb)](uint32_t imm) { run_python("imm", [&] { cb->get()(imm); }); };
}

WatchCallback watch_callback_of(PyRefPtr cb) {
  return [cb = std::move(cb)](uint64_t old_value, uint64_t new_value) {
    bool keep = true;
    run_python("watcher", [&] {
      py::object r = cb->get()(old_value, new_value);
      if (!r.is_none()) keep = PyObject_IsTrue(r.ptr()) != 0;
    });
    return keep;
  };
}

}  // namespace fabric_lib::python

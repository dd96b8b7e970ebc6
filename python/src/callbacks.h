// Python callables as engine callbacks. Every wrapper takes the GIL, calls the Python function,
// and logs (never propagates) an exception it raises, so a faulty callback cannot kill the engine.
#pragma once

#include <pybind11/pybind11.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "fabric_lib/completion.h"
#include "fabric_lib/imm_counter.h"
#include "fabric_lib/fabric_lib.h"
#include "gil.h"

namespace fabric_lib::python {

namespace py = pybind11;

// With the GIL held: raises TypeError unless `fn` is None, callable or an AsyncSlot.
PyRefPtr callable_arg(const py::object& fn, const char* name);

// A Completion that calls on_done() on success or on_error(FabricError) on failure. `keep` is held
// until the completion has run (e.g. the registration keep-alive of a write's source buffer), so
// the memory outlives the transfer. Any of the three may hold None.
// With `timeout` (seconds), an operation unfinished by then ends with DeadlineExceededError.
// The callback behind completion_of: on_done() or on_error(exception) under the GIL — or, when
// on_done is an asyncio form's AsyncSlot (async_completions.h), the outcome queued for its loop
// without the GIL. With the GIL held.
CompletionCallback callback_of(PyRefPtr on_done, PyRefPtr on_error, PyRefPtr keep = nullptr);
Completion completion_of(PyRefPtr on_done, PyRefPtr on_error, PyRefPtr keep = nullptr,
                         std::optional<double> timeout = std::nullopt);

// Whether on_done is an asyncio form's slot (async_completions.h) rather than a Python callable:
// its callback queues the outcome without the GIL, quick enough for Completion::inline_callback
// (the thread that ends the operation instead of the callback thread). With the GIL held.
bool is_async_slot(const PyRefPtr& on_done);

// Seconds -> a duration; ValueError unless > 0 and finite.
std::chrono::nanoseconds seconds_arg(double seconds, const char* name);

// Receive callbacks for post_recvs: on_recv(bytes) per message, on_error(FabricError).
RecvCallback recv_callback_of(PyRefPtr on_recv);
RecvErrorCallback recv_error_callback_of(PyRefPtr on_error);
// For post_recvs_into: on_recv(offset, length), the offset of the message from `region_base`.
// `keep` (the region's buffer) is held as long as the callback is.
RecvCallback recv_into_callback_of(PyRefPtr on_recv, uintptr_t region_base, PyRefPtr keep);

// A repeating expectation's callback: on_round(round) for each round, then once on_end(err,
// rounds). `at_end` runs (without the GIL) right before on_end.
RepeatingSink::Callback repeating_callback_of(PyRefPtr on_round, PyRefPtr on_end, std::function<void()> at_end);

// An imm observer calling cb(imm).
ImmCounter::Observer observer_of(PyRefPtr cb);

// A UVM watcher callback calling cb(old_value, new_value) with the GIL: False stops watching,
// anything else (None included) keeps watching. An exception is logged and keeps watching.
WatchCallback watch_callback_of(PyRefPtr cb);

// With the GIL held and a Python exception set or given: logs it with its traceback through the
// `fabric_lib` logger (Python's logging; stderr when unconfigured) and counts it.
void report_callback_error(const std::string& where, py::error_already_set& e);

// How many exceptions user callbacks have raised in this process.
uint64_t callback_error_count();

}  // namespace fabric_lib::python

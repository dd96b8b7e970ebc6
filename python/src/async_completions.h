// Completions of the asyncio forms, settled on the event loop's own thread. The engine's thread
// that ends an operation (Completion::inline_callback; the callback thread for wait_imm_count)
// does not take the GIL for them: it queues (token, status) and, when the queue was empty, wakes
// the loop through an eventfd the loop watches (loop.add_reader); the loop then drains the queue
// and settles the futures itself. (Through loop.call_soon_threadsafe, as before 2026-12-04,
// each completion took the GIL on the callback thread — waiting for the loop thread to give it
// up — and then woke the loop: one 4 KiB write_async took ~190 us on tcp loopback where a
// callback chain took ~55.)
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "fabric_lib/completion.h"
#include "fabric_lib/status.h"
#include "gil.h"

namespace fabric_lib::python {

namespace py = pybind11;

class AsyncCompletions : public std::enable_shared_from_this<AsyncCompletions> {
 public:
  // Throws OSError when no eventfd can be made.
  AsyncCompletions();
  ~AsyncCompletions();
  AsyncCompletions(const AsyncCompletions&) = delete;
  AsyncCompletions& operator=(const AsyncCompletions&) = delete;

  // Readable while completions wait to be drained.
  int fd() const { return fd_; }
  // The engine callback for the future behind `token`: queues the outcome (and `keep`, dropped by
  // drain() under the GIL rather than on an engine thread). Never takes the GIL.
  CompletionCallback callback(uint64_t token, PyRefPtr keep);
  // With the GIL: the outcomes queued since the last call, as [(token, None or FabricError)].
  py::list drain();

 private:
  struct Outcome {
    uint64_t token = 0;
    Status status;
    PyRefPtr keep;
  };
  void push(Outcome outcome);

  int fd_ = -1;
  std::mutex mu_;
  std::vector<Outcome> queued_;
  std::vector<Outcome> draining_;  // drain()'s, kept for its capacity
  bool signalled_ = false;         // the eventfd was written since the last drain
};

// What the asyncio forms pass as on_done: a future's token on its loop's AsyncCompletions.
// callback_of() turns it into AsyncCompletions::callback (on_error is then ignored).
struct AsyncSlot {
  std::shared_ptr<AsyncCompletions> completions;
  uint64_t token = 0;
};

void bind_async_completions(py::module_& m);

}  // namespace fabric_lib::python

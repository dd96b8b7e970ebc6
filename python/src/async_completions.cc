#include "async_completions.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>
#include <utility>

#include "errors.h"

namespace fabric_lib::python {

AsyncCompletions::AsyncCompletions() : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  if (fd_ < 0) throw std::system_error(errno, std::generic_category(), "eventfd for asyncio completions");
}

AsyncCompletions::~AsyncCompletions() {
  if (fd_ >= 0) close(fd_);
}

CompletionCallback AsyncCompletions::callback(uint64_t token, PyRefPtr keep) {
  return [self = shared_from_this(), token, keep = std::move(keep)](const Status& status) mutable {
    self->push({token, status, std::move(keep)});
  };
}

void AsyncCompletions::push(Outcome outcome) {
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queued_.push_back(std::move(outcome));
    wake = !signalled_;
    signalled_ = true;
  }
  if (wake) {
    const uint64_t one = 1;
    // Cannot fail short of a counter overflow (2^64 - 2 wakes without a read).
    [[maybe_unused]] const ssize_t n = write(fd_, &one, sizeof(one));
  }
}

py::list AsyncCompletions::drain() {
  // The eventfd first: a completion queued after this read writes it again (signalled_ is reset
  // below, under the lock that its push takes), so none is left without a wake.
  uint64_t count = 0;
  [[maybe_unused]] const ssize_t n = read(fd_, &count, sizeof(count));
  {
    std::lock_guard<std::mutex> lock(mu_);
    draining_.swap(queued_);
    signalled_ = false;
  }
  py::list out;
  for (Outcome& o : draining_) {
    out.append(py::make_tuple(o.token, o.status.ok() ? py::object(py::none()) : error_object(o.status)));
  }
  draining_.clear();  // drops the keep-alives here, under the GIL
  return out;
}

void bind_async_completions(py::module_& m) {
  py::class_<AsyncSlot>(m, "_AsyncSlot", "A future's place in an _AsyncCompletions (internal: the asyncio forms).");
  py::class_<AsyncCompletions, std::shared_ptr<AsyncCompletions>>(
      m, "_AsyncCompletions",
      "Completions of the asyncio forms, drained on the event loop's thread (internal: fabric_lib._aio).")
      .def(py::init<>())
      .def_property_readonly("fd", &AsyncCompletions::fd, "eventfd, readable while completions wait")
      .def(
          "slot", [](const std::shared_ptr<AsyncCompletions>& self, uint64_t token) { return AsyncSlot{self, token}; },
          py::arg("token"), "what to pass as on_done: the completion is queued under `token`")
      .def("drain", &AsyncCompletions::drain, "[(token, None or FabricError)] queued since the last call");
}

}  // namespace fabric_lib::python

// Requests are recycled, not freed: a submit takes one whose vectors kept their capacity from
// earlier use (planning then allocates nothing in steady state) and the worker gives it back when
// the request completed. Submitters and workers are different threads, so the free list is a
// lock-free queue. The pool keeps at most kMaxFree idle requests; beyond that they are freed.
#pragma once

#include <concurrentqueue/concurrentqueue.h>

#include <atomic>
#include <memory>

#include "core/request.h"

namespace fabric_lib::detail {

class RequestPool {
 public:
  static constexpr size_t kMaxFree = 1 << 14;

  RequestPool() = default;
  ~RequestPool() {
    Request* r = nullptr;
    while (free_.try_dequeue(r)) delete r;
  }
  RequestPool(const RequestPool&) = delete;
  RequestPool& operator=(const RequestPool&) = delete;

  // A request in its initial state.
  Request* acquire() {
    Request* r = nullptr;
    if (free_.try_dequeue(r)) {
      free_count_.fetch_sub(1, std::memory_order_relaxed);
      return r;
    }
    return new Request();
  }
  // Takes `r` back (any thread); it is reset here, so its completion and references go now.
  void release(Request* r) {
    if (!r) return;
    if (free_count_.load(std::memory_order_relaxed) >= kMaxFree) {
      delete r;
      return;
    }
    r->reset();
    free_count_.fetch_add(1, std::memory_order_relaxed);
    free_.enqueue(r);
  }

  // Gives a request back to its pool when it goes out of scope unsubmitted.
  struct Returner {
    RequestPool* pool = nullptr;
    void operator()(Request* r) const { pool->release(r); }
  };
  using Ptr = std::unique_ptr<Request, Returner>;
  Ptr take() { return Ptr(acquire(), Returner{this}); }

 private:
  moodycamel::ConcurrentQueue<Request*> free_;
  std::atomic<size_t> free_count_{0};
};

}  // namespace fabric_lib::detail

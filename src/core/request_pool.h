// Requests are recycled, not freed: a submit takes one whose vectors kept their capacity from
// earlier use (planning then allocates nothing in steady state) and its group's progress owner
// gives it back when the request completed. Submitters and owners may be different threads, so
// the free list is shared: a stack under a spin lock, held for a push or a pop only. (A
// lock-free MPMC queue was used before; its per-producer blocks still allocated now and then in
// steady state, and tests/alloc proves that nothing does now.) The pool keeps at most kMaxFree
// idle requests; beyond that they are freed.
#pragma once

#include <atomic>
#include <memory>
#include <vector>

#include "base/cpu_relax.h"
#include "core/request.h"

namespace fabric_lib::detail {

class RequestPool {
 public:
  static constexpr size_t kMaxFree = 1 << 14;

  RequestPool() = default;
  ~RequestPool() {
    for (Request* r : free_) delete r;
  }
  RequestPool(const RequestPool&) = delete;
  RequestPool& operator=(const RequestPool&) = delete;

  // A request in its initial state.
  Request* acquire() {
    Request* r = nullptr;
    lock();
    if (!free_.empty()) {
      r = free_.back();
      free_.pop_back();
    }
    unlock();
    return r ? r : new Request();
  }
  // Takes `r` back (any thread); it is reset here, so its completion and references go now.
  void release(Request* r) {
    if (!r) return;
    r->reset();
    lock();
    const bool keep = free_.size() < kMaxFree;
    if (keep) free_.push_back(r);  // grows only while the pool does: no allocation in steady state
    unlock();
    if (!keep) delete r;
  }

  // Gives a request back to its pool when it goes out of scope unsubmitted.
  struct Returner {
    RequestPool* pool = nullptr;
    void operator()(Request* r) const { pool->release(r); }
  };
  using Ptr = std::unique_ptr<Request, Returner>;
  Ptr take() { return Ptr(acquire(), Returner{this}); }

 private:
  void lock() {
    while (locked_.exchange(true, std::memory_order_acquire)) {
      while (locked_.load(std::memory_order_relaxed)) cpu_relax();
    }
  }
  void unlock() { locked_.store(false, std::memory_order_release); }

  alignas(64) std::atomic<bool> locked_{false};
  std::vector<Request*> free_;
};

}  // namespace fabric_lib::detail

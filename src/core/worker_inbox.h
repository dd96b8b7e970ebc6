// How other threads hand work to a group's worker: a one-request slot and a lock-free queue of
// requests, a queue of commands, and an eventfd that wakes the worker when it sleeps.
#pragma once

#include <concurrentqueue/concurrentqueue.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <mutex>

#include "core/request.h"

namespace fabric_lib::detail {

// A command runs on the worker thread with alive = true, or, once the worker has exited, on the
// posting thread with alive = false (so whoever waits on it is always answered).
using WorkerCommand = std::function<void(bool alive)>;

class WorkerInbox {
 public:
  WorkerInbox() : event_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  ~WorkerInbox() {
    delete slot_.load();  // only after a failed start
    Request* r = nullptr;
    while (requests_.try_dequeue(r)) delete r;
    if (event_fd_ >= 0) close(event_fd_);
  }

  // The slot takes a request when it is free and nothing is queued (the usual case: a request
  // arrives while the worker is between passes or spinning): one cache line changes hands, where
  // the queue moves several (2-core VM, a spinning consumer: taken 0.32 us after the hand-over
  // against 0.79 us; on the GPU machine the queue's hand-over took ~0.8 us of a shm submit, and
  // the worker's dequeue ~0.3 us more: docs/benchmarks.md). A submitter's requests keep their order: one finding its own earlier request
  // still queued queues behind it, and the slot's request comes out before the queue's
  // (pop_requests says how).
  void push_request(Request* request) {
    Request* empty = nullptr;
    if (queued_.load(std::memory_order_seq_cst) != 0 ||
        !slot_.compare_exchange_strong(empty, request, std::memory_order_seq_cst)) {
      queued_.fetch_add(1, std::memory_order_seq_cst);  // before the enqueue: its producer sees it
      requests_.enqueue(request);
    }
    wake();
  }
  // Worker side: up to `max` requests, each producer's in the order it pushed them. `max` must
  // be at least 2 (one place for the slot's request, the rest for the queue's); less returns 0.
  // The queue is read before the slot: a producer's request in the slot was put there before any
  // of its requests that are queued (it queues only while the slot is taken or others are
  // queued), so if one of those was dequeued, the slot already holds the earlier one, which goes
  // out first. (Reading the slot first let a request reach the slot just after the read, its
  // producer's next one be queued and dequeued at once, and the two come out swapped: seen once
  // under ASan in WorkerInbox.ManyProducersNothingLostFifoPerProducer.)
  size_t pop_requests(Request** out, size_t max) {
    if (max < 2) return 0;
    size_t k = 0;
    if (queued_.load(std::memory_order_acquire) != 0) k = requests_.try_dequeue_bulk(out + 1, max - 1);
    Request* first = nullptr;
    if (slot_.load(std::memory_order_relaxed) != nullptr) first = slot_.exchange(nullptr, std::memory_order_acq_rel);
    if (k > 0) queued_.fetch_sub(k, std::memory_order_release);
    if (first == nullptr) {
      std::copy(out + 1, out + 1 + k, out);
      return k;
    }
    out[0] = first;
    return k + 1;
  }

  void post(WorkerCommand command) {
    {
      std::lock_guard lock(mu_);
      if (!closed_) {
        commands_.enqueue(std::move(command));
        pending_commands_.fetch_add(1, std::memory_order_release);
        wake();
        return;
      }
    }
    command(false);
  }
  // Worker side: runs queued commands; returns how many ran.
  size_t run_commands() {
    if (pending_commands_.load(std::memory_order_acquire) == 0) return 0;
    size_t n = 0;
    WorkerCommand command;
    while (commands_.try_dequeue(command)) {
      pending_commands_.fetch_sub(1, std::memory_order_release);
      command(true);
      ++n;
    }
    return n;
  }
  // Worker side, at exit: refuses further commands and answers the queued ones with alive = false.
  void close_and_refuse() {
    {
      std::lock_guard lock(mu_);
      closed_ = true;
    }
    WorkerCommand command;
    while (commands_.try_dequeue(command)) command(false);
  }

  bool has_requests() const {
    return slot_.load(std::memory_order_seq_cst) != nullptr || queued_.load(std::memory_order_seq_cst) != 0;
  }
  bool has_work() const {
    return has_requests() || pending_commands_.load(std::memory_order_acquire) > 0 ||
           pokes_.load(std::memory_order_seq_cst) != pokes_seen_;
  }

  // A submitter posted on its own thread (GroupWorker::post_on_caller): the worker must poll for
  // those WRs' completions, so it is kept from sleeping (or woken). Same seq_cst handshake as below.
  void poke() {
    pokes_.fetch_add(1, std::memory_order_seq_cst);
    wake();
  }
  // Worker side, at the start of a pass: pokes until now are served by this pass.
  void mark_pokes_seen() { pokes_seen_ = pokes_.load(std::memory_order_seq_cst); }

  // Sleep protocol: the worker sets sleeping, re-checks has_work(), then blocks on event_fd();
  // producers enqueue, then wake() if it sleeps. Both sides use seq_cst, so one of them sees the
  // other.
  void set_sleeping(bool s) { sleeping_.store(s, std::memory_order_seq_cst); }
  // The worker's sleep is a block (IdleWaiter::block: until a wake-up, a completion queue's fd
  // or a timeout of up to 100 ms), not a nap of at most IdleWaiter::kSpinBudget. Set before its
  // last provider call of the pass, so a thread that takes the group's ownership after it sees
  // it: work that only polls advance (the ipc backend's copies) must wake a blocked worker.
  void set_blocked(bool b) { blocked_.store(b, std::memory_order_seq_cst); }
  bool worker_blocked() const { return blocked_.load(std::memory_order_seq_cst); }
  void wake() {
    if (sleeping_.load(std::memory_order_seq_cst)) {
      uint64_t one = 1;
      ssize_t ignored = write(event_fd_, &one, sizeof(one));
      (void)ignored;
    }
  }
  void clear_wakeups() {
    uint64_t value;
    while (read(event_fd_, &value, sizeof(value)) > 0) {
    }
  }
  int event_fd() const { return event_fd_; }

 private:
  alignas(64) std::atomic<Request*> slot_{nullptr};
  alignas(64) std::atomic<size_t> queued_{0};  // requests in requests_ (counted before the enqueue)
  moodycamel::ConcurrentQueue<Request*> requests_;
  moodycamel::ConcurrentQueue<WorkerCommand> commands_;
  std::atomic<size_t> pending_commands_{0};
  std::atomic<bool> sleeping_{false};
  std::atomic<bool> blocked_{false};
  std::atomic<uint64_t> pokes_{0};
  uint64_t pokes_seen_ = 0;  // worker only
  std::mutex mu_;
  bool closed_ = false;
  int event_fd_;
};

}  // namespace fabric_lib::detail

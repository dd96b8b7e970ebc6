// One thread that runs one producer's operations, in order: the CUDA copy engine's launcher
// (cuda_copy_engine.h says why a second thread issues its launches). Generic and CUDA-free, so
// that its ordering, failure and hand-over rules are tested on machines without a GPU.
//
// Ops come in groups (a flush's operations on one stream, ended by the op with `last` set),
// pushed back to back: one group's ops are never interleaved with another's. The Issuer runs an
// op and returns 0, or an error code; after an error the launcher tells the Issuer once
// (`failed`) and skips the rest of that group — its last op included, which is how a group's
// end (the copy engine's completion word) is never issued after a failure.
//
//   struct Op { uint64_t group; bool last; ... };
//   struct Issuer {
//     int issue(const Op&, bool on_launcher);  // on_launcher: on the launcher's own thread
//     void failed(const Op&, int code, bool on_launcher);
//   };
//
// Without a thread (`threaded` false) every push() runs the op at once, on the producer's thread,
// with the same rules.
//
// Threads: push(), idle() and run_inline() belong to one producer thread; the Issuer runs on the
// launcher's thread and, inside run_inline(), on the producer's — possibly at the same time (for
// different streams: the Issuer's per-thread state must allow that). The
// launcher spins for `spin` after its last op, then sleeps until the next push.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "base/cpu_relax.h"

namespace fabric_lib::gpu {

template <typename Op, typename Issuer>
class OpLauncher {
 public:
  // `capacity`: ops queued at most (rounded up to a power of two); push() waits beyond.
  // `at_start` runs first on the launcher's thread (its name, its CPUs).
  OpLauncher(size_t capacity, Issuer* issuer, std::chrono::microseconds spin = std::chrono::microseconds(50),
             bool threaded = true, std::function<void()> at_start = {})
      : issuer_(issuer), spin_(spin) {
    if (!threaded) return;
    size_t n = 1;
    while (n < capacity) n *= 2;
    slots_.resize(n);
    mask_ = static_cast<uint32_t>(n - 1);
    thread_ = std::thread([this, at_start = std::move(at_start)] {
      if (at_start) at_start();
      loop();
    });
  }
  // Runs every op pushed before it, then stops the thread.
  ~OpLauncher() {
    if (!thread_.joinable()) return;
    stop_.store(true, std::memory_order_seq_cst);
    wake();
    thread_.join();
  }

  bool threaded() const { return thread_.joinable(); }
  OpLauncher(const OpLauncher&) = delete;
  OpLauncher& operator=(const OpLauncher&) = delete;

  // Queues `op` (waits while the queue is full).
  void push(const Op& op) {
    if (!threaded()) {
      run(op, false);
      return;
    }
    const uint32_t head = head_.load(std::memory_order_relaxed);
    while (head - tail_.load(std::memory_order_acquire) > mask_) cpu_relax();
    slots_[head & mask_] = op;
    head_.store(head + 1, std::memory_order_seq_cst);
    // Pairs with the launcher's sleeping_ store and head_ re-check (both seq_cst): either it
    // sees this op before it waits, or this sees it asleep and wakes it.
    if (sleeping_.load(std::memory_order_seq_cst)) wake();
  }

  // Every op pushed so far has run (their Issuer calls are complete and visible to the caller).
  bool idle() const { return tail_.load(std::memory_order_acquire) == head_.load(std::memory_order_relaxed); }

  // Runs `op` on the calling (producer) thread now, with the same failure rules — ahead of
  // whatever is still queued, so only for ops that need not follow those (the copy engine: when
  // idle(), or on a stream none of whose ops were ever queued). A group runs all inline or all
  // queued: the two keep separate failure states.
  void run_inline(const Op& op) { run(op, false); }

 private:
  // Moves the word the launcher sleeps on (so a wait that starts after this returns at once).
  void wake() {
    wakes_.fetch_add(1, std::memory_order_seq_cst);
    wakes_.notify_one();
  }

  // What is skipped after a failure: the rest of `group`.
  struct Skip {
    bool skipping = false;
    uint64_t group = 0;
  };

  void run(const Op& op, bool on_launcher) {
    Skip& skip = on_launcher ? launcher_skip_ : inline_skip_;
    if (skip.skipping) {
      if (op.group == skip.group && !op.last) return;
      skip.skipping = false;
      if (op.group == skip.group) return;  // the failed group's end: skipped too
      // else a new group (its failed predecessor had no end op)
    }
    const int code = issuer_->issue(op, on_launcher);
    if (code == 0) return;
    issuer_->failed(op, code, on_launcher);
    if (!op.last) skip = {true, op.group};
  }

  void loop() {
    using Clock = std::chrono::steady_clock;
    uint32_t tail = tail_.load(std::memory_order_relaxed);
    for (;;) {
      uint32_t head = head_.load(std::memory_order_acquire);
      if (head == tail) {
        // Spin a while (ops come in bursts), then sleep until a push.
        const Clock::time_point until = Clock::now() + spin_;
        for (uint32_t i = 1; head == tail; ++i) {
          if (stop_.load(std::memory_order_acquire)) {
            head = head_.load(std::memory_order_acquire);
            if (head == tail) return;
            break;
          }
          cpu_relax();
          if (i % 64 == 0 && Clock::now() >= until) {
            const uint32_t wakes = wakes_.load(std::memory_order_seq_cst);
            sleeping_.store(true, std::memory_order_seq_cst);
            head = head_.load(std::memory_order_seq_cst);
            if (head == tail && !stop_.load(std::memory_order_seq_cst)) wakes_.wait(wakes, std::memory_order_seq_cst);
            sleeping_.store(false, std::memory_order_relaxed);
          }
          head = head_.load(std::memory_order_acquire);
        }
      }
      for (; tail != head; ++tail) {
        run(slots_[tail & mask_], true);
        tail_.store(tail + 1, std::memory_order_release);
      }
    }
  }

  Issuer* issuer_;
  std::chrono::microseconds spin_;
  std::vector<Op> slots_;
  uint32_t mask_ = 0;
  // Pushed and run counts (they wrap; the difference is what is queued).
  alignas(64) std::atomic<uint32_t> head_{0};
  alignas(64) std::atomic<uint32_t> tail_{0};
  std::atomic<bool> sleeping_{false};
  std::atomic<uint32_t> wakes_{0};  // moved by wake(): what a sleeping launcher waits on
  std::atomic<bool> stop_{false};
  Skip launcher_skip_;  // the launcher thread's
  Skip inline_skip_;    // run_inline's and the thread-less push()'s (the producer's thread)
  std::thread thread_;
};

}  // namespace fabric_lib::gpu

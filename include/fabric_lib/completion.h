// Completion sinks: how an accepted operation (or an imm expectation) reports that it ended.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

#include "fabric_lib/small_function.h"
#include "fabric_lib/status.h"

namespace fabric_lib {

// A pair of counters the caller polls. One request adds exactly 1 to `done` (success) or to
// `errors` (any failure, Cancelled included). The counter must outlive every request that
// reports to it. Several requests may share one counter.
struct CompletionCounter {
  std::atomic<uint64_t> done{0};
  std::atomic<uint64_t> errors{0};

  uint64_t finished() const { return done.load(std::memory_order_acquire) + errors.load(std::memory_order_acquire); }
  // Waits until finished() >= n; false on timeout. Spins for the first ~50 us, then yields the
  // core, and only after ~5 ms sleeps in 50 us steps: microsecond reaction for the common case.
  bool wait_for(uint64_t n, std::chrono::milliseconds timeout) const;
};

// Finished operations that the application drains on its own thread (Completion::queue): no hop
// to the callback thread, no callback to run — a poll-mode completion queue, as a NIC's CQ. A
// lock-free multi-producer queue: the engine's threads push, any thread may poll. It must outlive
// every operation that reports to it.
class CompletionQueue {
 public:
  struct Entry {
    uint64_t tag = 0;  // what the operation's Completion::queue was given
    Status status;
  };
  CompletionQueue();
  ~CompletionQueue();
  CompletionQueue(const CompletionQueue&) = delete;
  CompletionQueue& operator=(const CompletionQueue&) = delete;

  // Moves up to `max` finished operations into `out`; returns how many (0 when none finished).
  size_t poll(Entry* out, size_t max);
  bool poll(Entry& out) { return poll(&out, 1) == 1; }
  // Roughly how many wait to be polled.
  size_t size_approx() const;

 private:
  friend class CompletionDelivery;
  void push(uint64_t tag, const Status& status);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Called once with the final status. Runs on the engine's callback thread (never on a worker),
// so it may call the engine (submits included) but should not block for long. Any copyable
// callable converts to it; one whose captures fit 48 bytes (moving without throwing) is kept
// inline, so a callback made per request costs no heap allocation (fabric_lib/small_function.h).
using CompletionCallback = SmallFunction<void(const Status&)>;

using Clock = std::chrono::steady_clock;

// Where one operation's single completion goes, and by when it must have come.
class Completion {
 public:
  enum class Kind : uint8_t { kNone, kCallback, kCounter, kFlag, kQueue, kInline };

  // Nobody is told; failures are only logged. For fire-and-forget traffic.
  Completion() = default;
  static Completion callback(CompletionCallback fn);
  static Completion counter(CompletionCounter& c);
  // Stores `value` to `*flag` with release ordering when the operation succeeds, and
  // `error_value` when it fails: a flag in mapped pinned host memory that a GPU kernel polls
  // (the role GDRCopy plays in the paper). Set right on the thread that ends the operation.
  static Completion flag(uint64_t* flag, uint64_t value, uint64_t error_value = UINT64_MAX);
  // Pushes {tag, status} into `queue` on the thread that ends the operation.
  static Completion queue(CompletionQueue& queue, uint64_t tag);
  // Runs `fn` on the thread that ends the operation (a worker, a thread in progress(), the
  // caller's own thread for a refusal found after acceptance), not on the callback thread: a
  // sink of your own as quick as the ones above — a push into your queue and a wake of your
  // thread (the Python package's asyncio forms: a queue and an eventfd the event loop watches;
  // one hop fewer than callback()). `fn` must not block, must not call the engine and must not
  // throw; it holds up that thread's other work while it runs.
  static Completion inline_callback(CompletionCallback fn);

  // An operation still unfinished at `deadline` completes with DeadlineExceeded; completions
  // that come later are absorbed. (Overrides the engine's default timeout.)
  Completion&& with_deadline(Clock::time_point deadline) &&;
  Completion&& with_timeout(Clock::duration timeout) && { return std::move(*this).with_deadline(Clock::now() + timeout); }
  Completion& with_deadline(Clock::time_point deadline) &;
  bool has_deadline() const { return has_deadline_; }
  Clock::time_point deadline() const { return deadline_; }

  Kind kind() const { return kind_; }
  bool is_none() const { return kind_ == Kind::kNone; }

 private:
  // The engine's side: delivers sinks inline or hands callbacks to its callback thread.
  friend class CompletionDelivery;
  Kind kind_ = Kind::kNone;
  bool has_deadline_ = false;
  Clock::time_point deadline_{};
  CompletionCallback fn_;
  CompletionCounter* counter_ = nullptr;
  uint64_t* flag_ = nullptr;
  CompletionQueue* queue_ = nullptr;  // kQueue; flag_value_ holds the tag
  uint64_t flag_value_ = 0;
  uint64_t flag_error_value_ = 0;
};

}  // namespace fabric_lib

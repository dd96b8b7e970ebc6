// ImmCounter: turns arriving 32-bit immediates into completion notifications, without assuming
// any order of the network.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "fabric_lib/completion.h"
#include "fabric_lib/status.h"

namespace fabric_lib {

// Where a repeating expectation (ImmCounter::expect_every) reports: once per round — every time n
// more imms of its value arrived — and once at its end.
class RepeatingSink {
 public:
  // fn(round, Ok) for rounds 1, 2, 3, ... in order, on the engine's callback thread; then once
  // fn(rounds_fired, error) when the expectation ends (Cancelled by release(), cancel_expectation()
  // or stop()).
  using Callback = std::function<void(uint64_t round, const Status& status)>;
  static RepeatingSink callback(Callback fn);
  // done += 1 per round; errors += 1 at the end. Bumped on the thread that counted the imm.
  static RepeatingSink counter(CompletionCounter& c);
  // Stores the number of the latest round (1, 2, ...) to *word with release ordering, and
  // error_value at the end: a word in mapped memory a kernel polls (MappedWord). Rounds that
  // complete faster than a reader polls coalesce to the latest.
  static RepeatingSink flag(uint64_t* word, uint64_t error_value = UINT64_MAX);

  RepeatingSink() = default;
  bool is_none() const { return kind_ == Completion::Kind::kNone; }

 private:
  friend class CompletionDelivery;
  Completion::Kind kind_ = Completion::Kind::kNone;
  Callback fn_;
  CompletionCounter* counter_ = nullptr;
  uint64_t* word_ = nullptr;
  uint64_t error_value_ = 0;
};

// Counts imms per value, engine-wide, across all domains and groups. An engine's counter is
// TransferEngine::imms().
//
// - Every arriving imm is counted, even if nobody expects it yet: early arrivals are never lost.
// - expect(imm, n, sink) fires `sink` once with Ok when the count reaches n (immediately, if it
//   already has), then consumes n from the count; anything beyond n stays counted.
// - expect_every(imm, n, sink) fires `sink` each time n more have arrived (consuming n each
//   time, early arrivals included), until release(imm) or cancel_expectation(imm) ends it: one
//   registration per MoE step stream or weight version instead of one per round.
// - release(imm) forgets the value: its count drops to 0 and a pending expectation ends with
//   Cancelled. Use it before reusing an imm value whose earlier imms may still arrive.
// - The table holds at most `capacity` distinct values (counts > 0 or expectations). An imm that
//   arrives when it is full is dropped and reported (overflow_count(), the overflow handler,
//   and an error log line); expect() on a full table returns ResourceExhausted.
// - After the engine stopped, pending expectations have ended with Cancelled and expect()
//   returns Stopped.
//
// Thread safety: every method may be called from any thread, including completion callbacks.
// Sinks with callbacks, observers and overflow handlers run on the engine's callback thread.
class ImmCounter {
 public:
  // Called for every arriving imm (never changes the counts).
  using Observer = std::function<void(uint32_t imm)>;
  // Called when an arriving imm could not be counted.
  using OverflowHandler = std::function<void(uint32_t imm, const Status& why)>;

  static constexpr size_t kDefaultCapacity = 1 << 16;

  virtual ~ImmCounter() = default;
  ImmCounter(const ImmCounter&) = delete;
  ImmCounter& operator=(const ImmCounter&) = delete;

  // Fires `sink` when the count of `imm` reaches n (n >= 1). AlreadyExists when `imm` already has
  // a pending expectation; ResourceExhausted when the table is full; Stopped after shutdown.
  // If `sink` carries a deadline (Completion::with_deadline) and the count has not reached n by
  // then, the sink gets DeadlineExceeded and the expectation is removed; what arrived stays counted.
  virtual Status expect(uint32_t imm, uint64_t n, Completion sink) = 0;
  Status expect(uint32_t imm, uint64_t n, Completion sink, Clock::time_point deadline) {
    return expect(imm, n, std::move(sink).with_deadline(deadline));
  }
  // Fires `sink` every time the count of `imm` reaches n (n >= 1), consuming n each time, until
  // release(imm) / cancel_expectation(imm) / stop ends it (the sink then gets Cancelled once). A
  // count that already holds k * n fires k rounds at once. AlreadyExists when `imm` has an
  // expectation (one-shot or repeating); ResourceExhausted when the table is full.
  virtual Status expect_every(uint32_t imm, uint64_t n, RepeatingSink sink) = 0;
  // Rounds a repeating expectation of `imm` has fired (0 when it has none).
  virtual uint64_t rounds(uint32_t imm) const = 0;
  // Current count (arrived and not yet consumed). Fine to poll in a tight loop: the lock it takes
  // spins before it blocks, so the thread counting arrivals is not put to sleep behind a poller
  // (a counter or flag sink through expect() is still the cheaper way to wait).
  virtual uint64_t count(uint32_t imm) const = 0;
  // Whether `imm` has a pending expectation.
  virtual bool has_expectation(uint32_t imm) const = 0;
  // Forgets `imm` (count and expectation). NotFound when it was unknown.
  virtual Status release(uint32_t imm) = 0;
  // Ends the pending expectation of `imm` with Cancelled but keeps what arrived counted
  // (e.g. an asyncio waiter that was cancelled). NotFound when there is none.
  virtual Status cancel_expectation(uint32_t imm) = 0;
  // The n of `imm`'s pending expectation (one-shot or repeating), or 0 when there is none.
  virtual uint64_t expected(uint32_t imm) const = 0;

  virtual void set_observer(Observer observer) = 0;
  virtual void set_overflow_handler(OverflowHandler handler) = 0;
  virtual uint64_t overflow_count() const = 0;
  virtual size_t size() const = 0;  // distinct values held
  virtual size_t capacity() const = 0;

 protected:
  ImmCounter() = default;
};

}  // namespace fabric_lib

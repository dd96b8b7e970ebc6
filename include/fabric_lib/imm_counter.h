// ImmCounter: turns arriving 32-bit immediates into completion notifications, without assuming
// any order of the network.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "fabric_lib/completion.h"
#include "fabric_lib/status.h"

namespace fabric_lib {

namespace detail {
class CompletionDispatcher;
}

// Counts imms per value, engine-wide, across all domains and groups.
//
// - Every arriving imm is counted, even if nobody expects it yet: early arrivals are never lost.
// - expect(imm, n, sink) fires `sink` once with Ok when the count reaches n (immediately, if it
//   already has), then consumes n from the count; anything beyond n stays counted.
// - release(imm) forgets the value: its count drops to 0 and a pending expectation ends with
//   Cancelled. Use it before reusing an imm value whose earlier imms may still arrive.
// - The table holds at most `capacity` distinct values (counts > 0 or expectations). An imm that
//   arrives when it is full is dropped and reported (overflow_count(), the overflow handler,
//   and an error log line); expect() on a full table returns ResourceExhausted.
//
// Thread safety: every method may be called from any thread, including completion callbacks.
class ImmCounter {
 public:
  // Called on the engine's callback thread for every arriving imm (never changes the counts).
  using Observer = std::function<void(uint32_t imm)>;
  // Called on the engine's callback thread when an arriving imm could not be counted.
  using OverflowHandler = std::function<void(uint32_t imm, const Status& why)>;

  static constexpr size_t kDefaultCapacity = 1 << 16;

  // Standalone counter (used by engines and by tests); sinks are delivered through `dispatcher`,
  // or inline on the calling thread when it is null.
  explicit ImmCounter(size_t capacity = kDefaultCapacity, detail::CompletionDispatcher* dispatcher = nullptr);
  ~ImmCounter();
  ImmCounter(const ImmCounter&) = delete;
  ImmCounter& operator=(const ImmCounter&) = delete;

  // Fires `sink` when the count of `imm` reaches n (n >= 1). AlreadyExists when `imm` already has
  // a pending expectation; ResourceExhausted when the table is full; Stopped after shutdown().
  // If `sink` carries a deadline (Completion::with_deadline) and the count has not reached n by
  // then, the sink gets DeadlineExceeded and the expectation is removed; what arrived stays counted.
  Status expect(uint32_t imm, uint64_t n, Completion sink);
  Status expect(uint32_t imm, uint64_t n, Completion sink, Clock::time_point deadline) {
    return expect(imm, n, std::move(sink).with_deadline(deadline));
  }
  // Current count (arrived and not yet consumed).
  uint64_t count(uint32_t imm) const;
  // Whether `imm` has a pending expectation.
  bool has_expectation(uint32_t imm) const;
  // Forgets `imm` (count and expectation). NotFound when it was unknown.
  Status release(uint32_t imm);
  // Ends the pending expectation of `imm` with Cancelled but keeps what arrived counted
  // (e.g. an asyncio waiter that was cancelled). NotFound when there is none.
  Status cancel_expectation(uint32_t imm);
  // The n of `imm`'s pending expectation, or 0 when there is none.
  uint64_t expected(uint32_t imm) const;

  void set_observer(Observer observer);
  void set_overflow_handler(OverflowHandler handler);
  uint64_t overflow_count() const;
  size_t size() const;      // distinct values held
  size_t capacity() const;

  // --- used by the engine ---------------------------------------------------------------------
  // Counts `n` arrivals of `imm`; fires a reached expectation. Error when the table is full.
  Status add(uint32_t imm, uint64_t n = 1);
  // Ends every pending expectation with `why` and refuses new ones.
  void shutdown(const Status& why);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fabric_lib

// The engine's ImmCounter (fabric_lib/imm_counter.h): a table of counts and expectations per imm
// value, sharded by value so workers of different groups rarely contend. Expectation deadlines
// run on a TimerThread; sinks go through the engine's CompletionDispatcher (or inline, for a
// table without one: the unit tests).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/completion_dispatcher.h"
#include "fabric_lib/imm_counter.h"

namespace fabric_lib::detail {

class ImmCountTable final : public ImmCounter {
 public:
  explicit ImmCountTable(size_t capacity = kDefaultCapacity, CompletionDispatcher* dispatcher = nullptr);
  ~ImmCountTable() override;

  Status expect(uint32_t imm, uint64_t n, Completion sink) override;
  using ImmCounter::expect;
  Status expect_every(uint32_t imm, uint64_t n, RepeatingSink sink) override;
  uint64_t rounds(uint32_t imm) const override;
  uint64_t count(uint32_t imm) const override;
  bool has_expectation(uint32_t imm) const override;
  Status release(uint32_t imm) override;
  Status cancel_expectation(uint32_t imm) override;
  uint64_t expected(uint32_t imm) const override;
  void set_observer(Observer observer) override;
  void set_overflow_handler(OverflowHandler handler) override;
  uint64_t overflow_count() const override;
  size_t size() const override;
  size_t capacity() const override;

  // --- the engine's side ----------------------------------------------------------------------
  // Counts `n` arrivals of `imm`; fires a reached expectation. Error when the table is full.
  Status add(uint32_t imm, uint64_t n = 1);
  // Ends every pending expectation with `why` and refuses new ones.
  void shutdown(const Status& why);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fabric_lib::detail

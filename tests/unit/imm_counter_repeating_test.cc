// ImmCounter::expect_every: a round each time n more imms arrived, early arrivals included, in
// order, until release/cancel/shutdown ends it exactly once; counters and flags as sinks.
#include <gtest/gtest.h>

#include <mutex>
#include <vector>

#include "core/imm_count_table.h"

namespace fabric_lib {
namespace {

struct Rounds {
  std::mutex mu;
  std::vector<uint64_t> ok;       // rounds reported Ok, in order
  std::vector<Status> ends;       // final statuses
  std::vector<uint64_t> end_rounds;
  RepeatingSink sink() {
    return RepeatingSink::callback([this](uint64_t round, const Status& s) {
      std::lock_guard lock(mu);
      if (s.ok()) {
        ok.push_back(round);
      } else {
        ends.push_back(s);
        end_rounds.push_back(round);
      }
    });
  }
};

TEST(ImmCounterRepeating, FiresEveryNArrivalsAndConsumesN) {
  detail::ImmCountTable c(16);
  Rounds r;
  ASSERT_TRUE(c.expect_every(7, 3, r.sink()).ok());
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(c.add(7).ok());
  EXPECT_EQ(r.ok, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(c.count(7), 2u);  // 8 = 2 * 3 + 2
  EXPECT_EQ(c.rounds(7), 2u);
  EXPECT_TRUE(c.has_expectation(7));
  EXPECT_EQ(c.expected(7), 3u);
  ASSERT_TRUE(c.add(7).ok());
  EXPECT_EQ(r.ok, (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(c.count(7), 0u);
  EXPECT_TRUE(r.ends.empty());
}

TEST(ImmCounterRepeating, EarlyArrivalsCountTowardTheFirstRounds) {
  detail::ImmCountTable c(16);
  for (int i = 0; i < 7; ++i) ASSERT_TRUE(c.add(9).ok());
  Rounds r;
  ASSERT_TRUE(c.expect_every(9, 3, r.sink()).ok());
  EXPECT_EQ(r.ok, (std::vector<uint64_t>{1, 2}));  // two rounds at once, in order
  EXPECT_EQ(c.count(9), 1u);
  ASSERT_TRUE(c.add(9, 2).ok());  // a batch of arrivals completes round 3
  EXPECT_EQ(r.ok, (std::vector<uint64_t>{1, 2, 3}));
}

TEST(ImmCounterRepeating, ReleaseEndsItOnceWithCancelledAndForgetsTheCount) {
  detail::ImmCountTable c(16);
  Rounds r;
  ASSERT_TRUE(c.expect_every(5, 2, r.sink()).ok());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(c.add(5).ok());
  ASSERT_TRUE(c.release(5).ok());
  ASSERT_EQ(r.ends.size(), 1u);
  EXPECT_EQ(r.ends[0].code(), ErrorCode::kCancelled);
  EXPECT_EQ(r.end_rounds[0], 2u);  // it had fired two rounds
  EXPECT_EQ(c.count(5), 0u);
  EXPECT_FALSE(c.has_expectation(5));
  ASSERT_TRUE(c.add(5).ok());  // later arrivals are counted again, and fire nothing
  EXPECT_EQ(r.ok.size(), 2u);
  EXPECT_EQ(r.ends.size(), 1u);
  EXPECT_EQ(c.count(5), 1u);
}

TEST(ImmCounterRepeating, CancelExpectationKeepsTheCount) {
  detail::ImmCountTable c(16);
  Rounds r;
  ASSERT_TRUE(c.expect_every(4, 3, r.sink()).ok());
  ASSERT_TRUE(c.add(4, 2).ok());
  ASSERT_TRUE(c.cancel_expectation(4).ok());
  ASSERT_EQ(r.ends.size(), 1u);
  EXPECT_EQ(r.ends[0].code(), ErrorCode::kCancelled);
  EXPECT_EQ(c.count(4), 2u);
  EXPECT_EQ(c.rounds(4), 0u);
  // A new one-shot expectation may now take over the value.
  CompletionCounter once;
  ASSERT_TRUE(c.expect(4, 3, Completion::counter(once)).ok());
  ASSERT_TRUE(c.add(4).ok());
  EXPECT_EQ(once.done.load(), 1u);
}

TEST(ImmCounterRepeating, RefusesASecondExpectationAndBadArguments) {
  detail::ImmCountTable c(16);
  CompletionCounter counter;
  ASSERT_TRUE(c.expect_every(1, 2, RepeatingSink::counter(counter)).ok());
  EXPECT_EQ(c.expect_every(1, 2, RepeatingSink::counter(counter)).code(), ErrorCode::kAlreadyExists);
  EXPECT_EQ(c.expect(1, 2, Completion::counter(counter)).code(), ErrorCode::kAlreadyExists);
  EXPECT_EQ(c.expect_every(2, 0, RepeatingSink::counter(counter)).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(c.expect_every(3, 1, RepeatingSink()).code(), ErrorCode::kInvalidArgument);
}

TEST(ImmCounterRepeating, CounterAndFlagSinks) {
  detail::ImmCountTable c(16);
  CompletionCounter counter;
  alignas(8) uint64_t word = 0;
  ASSERT_TRUE(c.expect_every(11, 2, RepeatingSink::counter(counter)).ok());
  ASSERT_TRUE(c.expect_every(12, 1, RepeatingSink::flag(&word, 999)).ok());
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(c.add(11).ok());
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(c.add(12).ok());
  EXPECT_EQ(counter.done.load(), 5u);
  EXPECT_EQ(counter.errors.load(), 0u);
  EXPECT_EQ(__atomic_load_n(&word, __ATOMIC_ACQUIRE), 4u);  // the latest round
  c.shutdown(cancelled("stop"));
  EXPECT_EQ(counter.errors.load(), 1u);
  EXPECT_EQ(__atomic_load_n(&word, __ATOMIC_ACQUIRE), 999u);
  EXPECT_EQ(c.expect_every(13, 1, RepeatingSink::counter(counter)).code(), ErrorCode::kStopped);
}

TEST(ImmCounterRepeating, ThroughTheDispatcherRoundsStayInOrder) {
  Rounds r;
  {
    detail::CompletionDispatcher dispatcher;
    detail::ImmCountTable c(16, &dispatcher);
    ASSERT_TRUE(c.expect_every(3, 1, r.sink()).ok());
    for (int i = 0; i < 1000; ++i) ASSERT_TRUE(c.add(3).ok());
    ASSERT_TRUE(c.release(3).ok());
    dispatcher.shutdown();  // runs everything queued
  }
  ASSERT_EQ(r.ok.size(), 1000u);
  for (uint64_t i = 0; i < 1000; ++i) EXPECT_EQ(r.ok[i], i + 1);
  ASSERT_EQ(r.ends.size(), 1u);
  EXPECT_EQ(r.end_rounds[0], 1000u);
}

}  // namespace
}  // namespace fabric_lib

// ImmCounter deadlines, cancel_expectation()/expected(), and the flag completion sink.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "fabric_lib/completion.h"
#include "core/completion_delivery.h"
#include "core/imm_count_table.h"

namespace fabric_lib {
namespace {

using namespace std::chrono_literals;

// An expectation not reached by its deadline ends with DeadlineExceeded; what arrived stays counted.
TEST(ImmCounterDeadline, UnreachedExpectationEndsAtItsDeadline) {
  detail::ImmCountTable c(16);
  CompletionCounter sink;
  ASSERT_TRUE(c.add(5, 2).ok());
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(c.expect(5, 3, Completion::counter(sink), Clock::now() + 100ms).ok());
  ASSERT_TRUE(sink.wait_for(1, 5s));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 90ms);
  EXPECT_EQ(sink.errors, 1u);
  EXPECT_EQ(c.count(5), 2u);
  EXPECT_FALSE(c.has_expectation(5));
  // A new expectation can take its place and is met normally.
  ASSERT_TRUE(c.expect(5, 3, Completion::counter(sink), Clock::now() + 5s).ok());
  ASSERT_TRUE(c.add(5).ok());
  EXPECT_EQ(sink.done, 1u);
  EXPECT_EQ(c.count(5), 0u);
}

// A deadline that already passed fires at once; one met in time never reports DeadlineExceeded.
TEST(ImmCounterDeadline, PastDeadlineFiresAndMetDeadlineDoesNot) {
  detail::ImmCountTable c(16);
  Status got = internal_error("none");
  std::atomic<int> calls{0};
  ASSERT_TRUE(c.expect(1, 1, Completion::callback([&](const Status& s) {
                                got = s;
                                calls++;
                              }),
                       Clock::now() - 1ms)
                  .ok());
  for (int i = 0; i < 500 && calls.load() == 0; ++i) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(got.code(), ErrorCode::kDeadlineExceeded);

  CompletionCounter met, witness;
  ASSERT_TRUE(c.expect(2, 1, Completion::counter(met), Clock::now() + 50ms).ok());
  ASSERT_TRUE(c.add(2).ok());
  EXPECT_EQ(met.done, 1u);  // a counter sink is set inline, by add()
  // A witness whose deadline comes later, never met: the timer thread ends deadlines in order,
  // so once the witness's has fired, the met expectation's deadline has passed too.
  ASSERT_TRUE(c.expect(3, 1, Completion::counter(witness), Clock::now() + 60ms).ok());
  ASSERT_TRUE(witness.wait_for(1, 5s));
  EXPECT_EQ(witness.errors, 1u);
  EXPECT_EQ(met.done, 1u);
  EXPECT_EQ(met.errors, 0u);
}

// cancel_expectation() ends the expectation with Cancelled but keeps the count; expected()
// reports the pending n.
TEST(ImmCounterDeadline, CancelExpectationKeepsTheCount) {
  detail::ImmCountTable c(16);
  CompletionCounter sink;
  ASSERT_TRUE(c.add(9, 2).ok());
  ASSERT_TRUE(c.expect(9, 5, Completion::counter(sink), Clock::now() + 30ms).ok());
  EXPECT_EQ(c.expected(9), 5u);
  ASSERT_TRUE(c.cancel_expectation(9).ok());
  EXPECT_EQ(sink.errors, 1u);
  EXPECT_EQ(c.count(9), 2u);
  EXPECT_EQ(c.expected(9), 0u);
  EXPECT_EQ(c.cancel_expectation(9).code(), ErrorCode::kNotFound);
  // The cancelled deadline never fires later: a witness deadline after it fires (deadlines end
  // in order on the timer thread), and the sink still has its one completion.
  CompletionCounter witness;
  ASSERT_TRUE(c.expect(10, 1, Completion::counter(witness), Clock::now() + 40ms).ok());
  ASSERT_TRUE(witness.wait_for(1, 5s));
  EXPECT_EQ(sink.finished(), 1u);
}

// The flag sink stores the success value, or the error value, with release ordering.
TEST(CompletionFlag, StoresValueOnSuccessAndErrorValueOnFailure) {
  alignas(8) uint64_t flag = 0;
  Completion ok = Completion::flag(&flag, 7, 99);
  CompletionDelivery::deliver_inline(ok, ok_status());
  EXPECT_EQ(__atomic_load_n(&flag, __ATOMIC_ACQUIRE), 7u);
  Completion bad = Completion::flag(&flag, 7, 99);
  CompletionDelivery::deliver_inline(bad, cancelled("x"));
  EXPECT_EQ(__atomic_load_n(&flag, __ATOMIC_ACQUIRE), 99u);
  detail::ImmCountTable c(4);
  flag = 0;
  ASSERT_TRUE(c.expect(3, 2, Completion::flag(&flag, 1)).ok());
  c.add(3);
  EXPECT_EQ(__atomic_load_n(&flag, __ATOMIC_ACQUIRE), 0u);
  c.add(3);
  EXPECT_EQ(__atomic_load_n(&flag, __ATOMIC_ACQUIRE), 1u);
}

}  // namespace
}  // namespace fabric_lib

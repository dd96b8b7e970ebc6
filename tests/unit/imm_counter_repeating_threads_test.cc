// A repeating expectation counted from several threads at once (the workers of several groups
// count one engine-wide ImmCounter) and ended from yet another: its callback still sees rounds
// 1, 2, 3, ... in order with the end last, naming the rounds fired, and its flag never goes back
// to an older round (nor from the end value to a round).
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include "core/completion_dispatcher.h"
#include "core/imm_count_table.h"

namespace fabric_lib {
namespace {

constexpr int kThreads = 3;
constexpr int kPerThread = 20000;

TEST(ImmCounterRepeatingThreads, CallbackRoundsStayInOrderWithTheEndLast) {
  std::mutex mu;
  std::vector<uint64_t> rounds;
  std::vector<uint64_t> end_rounds;
  bool round_after_end = false;
  {
    detail::CompletionDispatcher dispatcher;
    detail::ImmCountTable c(16, &dispatcher);
    ASSERT_TRUE(c.expect_every(3, 1, RepeatingSink::callback([&](uint64_t r, const Status& s) {
                  std::lock_guard lock(mu);
                  if (s.ok()) {
                    round_after_end |= !end_rounds.empty();
                    rounds.push_back(r);
                  } else {
                    end_rounds.push_back(r);
                  }
                })).ok());
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&] {
        for (int i = 0; i < kPerThread; ++i) c.add(3);
      });
    }
    // End it while the counting threads are still at it.
    while (c.rounds(3) < kPerThread) std::this_thread::yield();
    ASSERT_TRUE(c.release(3).ok());
    for (auto& t : threads) t.join();
    dispatcher.shutdown();
  }
  ASSERT_EQ(end_rounds.size(), 1u);
  EXPECT_FALSE(round_after_end) << "a round was reported after the end";
  ASSERT_EQ(rounds.size(), end_rounds[0]) << "the end must name the rounds reported";
  size_t out_of_order = 0;
  for (size_t i = 0; i < rounds.size(); ++i) out_of_order += rounds[i] != i + 1;
  EXPECT_EQ(out_of_order, 0u);
}

TEST(ImmCounterRepeatingThreads, FlagNeverGoesBack) {
  constexpr uint64_t kEnded = UINT64_MAX;
  alignas(8) uint64_t word = 0;
  detail::CompletionDispatcher dispatcher;
  detail::ImmCountTable c(16, &dispatcher);
  ASSERT_TRUE(c.expect_every(4, 1, RepeatingSink::flag(&word, kEnded)).ok());
  std::atomic<bool> stop_reading{false};
  std::atomic<uint64_t> regressions{0};
  std::thread reader([&] {
    uint64_t last = 0;
    while (!stop_reading.load()) {
      const uint64_t w = __atomic_load_n(&word, __ATOMIC_ACQUIRE);
      if (last == kEnded ? w != kEnded : w < last) regressions.fetch_add(1);
      last = w;
    }
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kPerThread; ++i) c.add(4);
    });
  }
  while (c.rounds(4) < kPerThread) std::this_thread::yield();
  ASSERT_TRUE(c.release(4).ok());
  for (auto& t : threads) t.join();
  stop_reading = true;
  reader.join();
  EXPECT_EQ(__atomic_load_n(&word, __ATOMIC_ACQUIRE), kEnded);
  EXPECT_EQ(regressions.load(), 0u);
  dispatcher.shutdown();
}

}  // namespace
}  // namespace fabric_lib

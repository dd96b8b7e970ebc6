// SpinningMutex (base/spinning_mutex.h): the ImmCounter's shard lock. It must exclude as a mutex
// does, with threads that spin and threads that end up blocking alike, and try_lock must fail
// while another thread holds it.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include "base/spinning_mutex.h"

namespace fabric_lib {
namespace {

TEST(SpinningMutex, ExcludesUnderContention) {
  SpinningMutex mu;
  uint64_t plain = 0;  // unsynchronized but for the mutex: a lost update shows as a short count
  constexpr int kThreads = 4, kRounds = 100000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kRounds; ++i) {
        std::lock_guard lock(mu);
        const uint64_t v = plain;
        if (i % 1024 == 0) std::this_thread::yield();  // a holder that loses its core: others block
        plain = v + 1;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(plain, uint64_t{kThreads} * kRounds);
}

TEST(SpinningMutex, TryLockFailsWhileAnotherThreadHoldsIt) {
  SpinningMutex mu;
  std::atomic<bool> held{false}, release{false};
  std::thread holder([&] {
    std::lock_guard lock(mu);
    held.store(true);
    while (!release.load()) std::this_thread::yield();
  });
  while (!held.load()) std::this_thread::yield();
  EXPECT_FALSE(mu.try_lock());
  release.store(true);
  holder.join();
  ASSERT_TRUE(mu.try_lock());
  mu.unlock();
}

}  // namespace
}  // namespace fabric_lib

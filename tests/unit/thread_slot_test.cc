// thread_slot() (base/thread_slot.h): each live thread holds its own index, an exiting thread
// gives it back, and beyond kMaxThreadSlots live threads the rest get none (-1) — the submit
// path's own stripes depend on two live threads never sharing an index.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "base/thread_slot.h"

namespace fabric_lib {
namespace {

// Starts `n` threads that each take their slot and stay alive until release().
class LiveThreads {
 public:
  explicit LiveThreads(size_t n) : slots_(n, -3) {
    for (size_t i = 0; i < n; ++i) {
      threads_.emplace_back([this, i] {
        const int s = thread_slot();
        std::unique_lock lock(mu_);
        slots_[i] = s;
        second_call_same_ &= thread_slot() == s;
        ++started_;
        cv_.notify_all();
        cv_.wait(lock, [this] { return released_; });
      });
    }
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return started_ == n; });
  }
  ~LiveThreads() { release(); }
  void release() {
    {
      std::lock_guard lock(mu_);
      released_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
  }
  std::vector<int> slots() {
    std::lock_guard lock(mu_);
    return slots_;
  }
  bool second_call_same() {
    std::lock_guard lock(mu_);
    return second_call_same_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int> slots_;
  std::vector<std::thread> threads_;
  size_t started_ = 0;
  bool released_ = false;
  bool second_call_same_ = true;
};

TEST(ThreadSlot, LiveThreadsHoldDistinctSlotsInRange) {
  LiveThreads live(32);
  const std::vector<int> slots = live.slots();
  const std::set<int> distinct(slots.begin(), slots.end());
  EXPECT_EQ(distinct.size(), slots.size());
  for (int s : slots) {
    EXPECT_GE(s, 0);
    EXPECT_LT(s, static_cast<int>(kMaxThreadSlots));
  }
  EXPECT_TRUE(live.second_call_same());
}

TEST(ThreadSlot, AnExitingThreadGivesItsSlotBack) {
  // Far more threads than slots, one after another: each finds a free slot only if the threads
  // before it gave theirs back.
  for (size_t i = 0; i < 3 * kMaxThreadSlots; ++i) {
    int s = -3;
    std::thread([&] { s = thread_slot(); }).join();
    ASSERT_GE(s, 0) << "thread " << i;
  }
}

TEST(ThreadSlot, BeyondTheLimitLiveThreadsGetNoneUntilOneExits) {
  const int mine = thread_slot();  // this thread holds one too (or none, if it was refused)
  LiveThreads live(kMaxThreadSlots);
  const std::vector<int> slots = live.slots();
  const size_t held = static_cast<size_t>(std::count_if(slots.begin(), slots.end(), [](int s) { return s >= 0; }));
  // Every slot taken, none twice: alone in its process this thread and the live ones hold all
  // of them; beside other tests (one process for the whole binary) their live threads may hold
  // a few, so the refused thread below is what proves the table full.
  EXPECT_LE(held + (mine >= 0 ? 1 : 0), kMaxThreadSlots);
  EXPECT_GE(held + (mine >= 0 ? 1 : 0), kMaxThreadSlots - 8) << "far fewer slots than live threads";
  std::set<int> distinct;
  for (int s : slots) {
    if (s >= 0) distinct.insert(s);
  }
  if (mine >= 0) distinct.insert(mine);
  EXPECT_EQ(distinct.size(), held + (mine >= 0 ? 1 : 0)) << "a slot was given twice";
  int extra = -3;
  std::thread([&] { extra = thread_slot(); }).join();
  EXPECT_EQ(extra, -1);
  live.release();
  std::thread([&] { extra = thread_slot(); }).join();
  EXPECT_GE(extra, 0);
}

}  // namespace
}  // namespace fabric_lib

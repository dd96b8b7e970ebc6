// The UVM watcher thread, on plain host words (the GPU only ever writes such a word over PCIe):
// changes reach the callback in order, "stop watching" and unwatch() are honoured at once, one
// watcher can go while others keep running, and stop() ends it all.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "core/uvm_watcher_hub.h"
#include "thread_state.h"

namespace fabric_lib::detail {
namespace {

using namespace std::chrono_literals;

struct alignas(64) Word {
  uint64_t v = 0;
  void store(uint64_t x) { __atomic_store_n(&v, x, __ATOMIC_RELEASE); }
};

// Records (old, new) pairs.
struct Recorder {
  std::mutex mu;
  std::vector<std::pair<uint64_t, uint64_t>> seen;
  std::atomic<uint64_t> last{0};
  std::atomic<size_t> calls{0};
  WatchCallback callback(uint64_t stop_at = UINT64_MAX) {
    return [this, stop_at](uint64_t old_value, uint64_t new_value) {
      std::lock_guard lock(mu);
      seen.emplace_back(old_value, new_value);
      last.store(new_value);
      calls.fetch_add(1);
      return new_value < stop_at;
    };
  }
};

// Polls a state until it holds; false after `timeout` (each wait here takes microseconds).
bool wait_until(const std::function<bool()>& done, std::chrono::milliseconds timeout = 5s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(100us);
  }
  return true;
}

// Proves a watcher was not called for `value` without waiting for "long enough": after the
// store, a witness watching the same word sees two later values. The pass in which it sees the
// second one started after it had seen the first, so that pass read the word after the store of
// `value`: a watcher still active would have been called in it, before the witness.
void expect_passed_over(UvmWatcherHub& hub, Word& word, uint64_t value) {
  word.store(value);
  Recorder witness;
  Result<uint64_t> id = hub.watch(&word.v, witness.callback());
  ASSERT_TRUE(id.ok());
  for (uint64_t later : {value + 1, value + 2}) {
    word.store(later);
    ASSERT_TRUE(wait_until([&] { return witness.last.load() == later; })) << "the hub never polled value " << later;
  }
  hub.unwatch(*id);
}

// Bumps `word` to 1..n, waiting for the watcher to have seen each value (like a kernel with a
// busy wait between layers), so every value is observed.
void bump_and_wait(Word& word, Recorder& r, uint64_t n) {
  for (uint64_t i = 1; i <= n; ++i) {
    word.store(i);
    ASSERT_TRUE(wait_until([&] { return r.last.load() == i; })) << "value " << i << " never seen";
  }
}

TEST(UvmWatcherHub, CallbackSeesEveryChangeInOrder) {
  auto hub = UvmWatcherHub::create({});
  Word word;
  Recorder r;
  ASSERT_TRUE(hub->watch(&word.v, r.callback()).ok());
  bump_and_wait(word, r, 50);
  std::lock_guard lock(r.mu);
  ASSERT_EQ(r.seen.size(), 50u);
  for (size_t i = 0; i < r.seen.size(); ++i) {
    EXPECT_EQ(r.seen[i].first, i);       // old = the value seen before
    EXPECT_EQ(r.seen[i].second, i + 1);  // new
  }
  hub->stop();
}

TEST(UvmWatcherHub, FastWritesAreCoalescedButTheLastValueArrives) {
  auto hub = UvmWatcherHub::create({.cpu = -1, .spin = true});
  Word word;
  Recorder r;
  ASSERT_TRUE(hub->watch(&word.v, r.callback()).ok());
  for (uint64_t i = 1; i <= 100000; ++i) word.store(i);
  ASSERT_TRUE(wait_until([&] { return r.last.load() == 100000; }));
  std::lock_guard lock(r.mu);
  for (size_t i = 1; i < r.seen.size(); ++i) {
    EXPECT_EQ(r.seen[i].first, r.seen[i - 1].second);
    EXPECT_GT(r.seen[i].second, r.seen[i].first);
  }
  hub->stop();
}

TEST(UvmWatcherHub, ReturningFalseStopsWatching) {
  auto hub = UvmWatcherHub::create({});
  Word word;
  Recorder r;
  ASSERT_TRUE(hub->watch(&word.v, r.callback(/*stop_at=*/3)).ok());
  bump_and_wait(word, r, 3);
  ASSERT_TRUE(wait_until([&] { return hub->watching() == 0; }));
  expect_passed_over(*hub, word, 4);
  EXPECT_EQ(r.calls.load(), 3u);
  hub->stop();
}

TEST(UvmWatcherHub, UnwatchReturnsOnlyWhenTheCallbackIsGoneForGood) {
  auto hub = UvmWatcherHub::create({});
  Word word;
  auto token = std::make_shared<int>(0);
  std::atomic<int> calls{0};
  std::atomic<bool> in_second{false}, release{false};
  Result<uint64_t> id = hub->watch(&word.v, [token, &calls, &in_second, &release](uint64_t, uint64_t v) {
    if (v == 2) {  // the second call stays running until the test lets it go
      in_second = true;
      const auto give_up = std::chrono::steady_clock::now() + 10s;
      while (!release.load() && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
    }
    calls.fetch_add(1);
    return true;
  });
  ASSERT_TRUE(id.ok());
  word.store(1);
  ASSERT_TRUE(wait_until([&] { return calls.load() == 1; }));
  word.store(2);
  ASSERT_TRUE(wait_until([&] { return in_second.load(); }));  // the second call is running now
  std::atomic<pid_t> tid{0};
  std::atomic<bool> returned{false};
  std::thread unwatcher([&] {
    tid = testing::current_tid();
    hub->unwatch(*id);
    returned = true;
  });
  // unwatch() blocks (its thread asleep in the kernel, waiting for the hub) while the callback runs.
  ASSERT_TRUE(wait_until([&] { return returned.load() || (tid.load() && testing::thread_state(tid.load()) == 'S'); }));
  EXPECT_FALSE(returned.load()) << "unwatch() returned while the callback was running";
  EXPECT_EQ(calls.load(), 1);
  release = true;
  unwatcher.join();
  EXPECT_EQ(calls.load(), 2);       // the running call finished before unwatch() returned
  EXPECT_EQ(token.use_count(), 1);  // the callback (and what it captured) was destroyed
  expect_passed_over(*hub, word, 3);
  EXPECT_EQ(calls.load(), 2);
  hub->stop();
}

TEST(UvmWatcherHub, OneWatcherGoesWhileOthersKeepRunning) {
  auto hub = UvmWatcherHub::create({});
  constexpr int kWatchers = 8;
  std::vector<Word> words(kWatchers);
  std::vector<Recorder> recorders(kWatchers);
  std::vector<uint64_t> ids;
  for (int i = 0; i < kWatchers; ++i) {
    Result<uint64_t> id = hub->watch(&words[i].v, recorders[i].callback());
    ASSERT_TRUE(id.ok());
    ids.push_back(*id);
  }
  for (uint64_t step = 1; step <= 20; ++step) {
    if (step == 10) {
      for (int i = 0; i < kWatchers; i += 2) hub->unwatch(ids[i]);  // half go mid-run
    }
    for (int i = 0; i < kWatchers; ++i) words[i].store(step);
    for (int i = 1; i < kWatchers; i += 2) {
      ASSERT_TRUE(wait_until([&] { return recorders[i].last.load() == step; }));
    }
  }
  for (int i = 0; i < kWatchers; ++i) {
    if (i % 2 == 1) {
      EXPECT_EQ(recorders[i].last.load(), 20u);
    } else {
      EXPECT_LT(recorders[i].last.load(), 10u);
    }
  }
  EXPECT_EQ(hub->watching(), static_cast<size_t>(kWatchers / 2));
  hub->stop();
}

TEST(UvmWatcherHub, CallbacksMayUnwatchAndWatch) {
  auto hub = UvmWatcherHub::create({});
  Word a, b, c;
  Recorder rb, rc;
  Result<uint64_t> id_b = hub->watch(&b.v, rb.callback());
  ASSERT_TRUE(id_b.ok());
  std::atomic<bool> added{false};
  uint64_t self_id = 0;
  Result<uint64_t> id_a = hub->watch(&a.v, [&](uint64_t, uint64_t) {
    hub->unwatch(*id_b);      // another watcher: no call after this one returns
    hub->unwatch(self_id);    // itself
    added = hub->watch(&c.v, rc.callback()).ok();
    return true;
  });
  ASSERT_TRUE(id_a.ok());
  self_id = *id_a;
  a.store(1);
  ASSERT_TRUE(wait_until([&] { return added.load(); }));
  b.store(1);
  c.store(7);
  ASSERT_TRUE(wait_until([&] { return rc.last.load() == 7; }));
  EXPECT_EQ(rb.calls.load(), 0u);
  EXPECT_EQ(hub->watching(), 1u);
  hub->stop();
}

TEST(UvmWatcherHub, StopEndsWatchingAndRefusesNewWatchers) {
  const size_t hub_threads = testing::threads_named("fl-watcher");  // of other tests' hubs
  auto hub = UvmWatcherHub::create({});
  Word word;
  Recorder r;
  Result<uint64_t> id = hub->watch(&word.v, r.callback());
  ASSERT_TRUE(id.ok());
  // Started by the first watcher (it names itself once running).
  ASSERT_TRUE(wait_until([&] { return testing::threads_named("fl-watcher") == hub_threads + 1; }));
  hub->stop();
  EXPECT_EQ(hub->watch(&word.v, r.callback()).status().code(), ErrorCode::kStopped);
  hub->unwatch(*id);  // returns at once
  // The hub's thread is gone (joined), so nothing polls the word any more.
  EXPECT_EQ(testing::threads_named("fl-watcher"), hub_threads);
  word.store(1);
  EXPECT_EQ(r.calls.load(), 0u);
  EXPECT_EQ(hub->watching(), 0u);
}

TEST(UvmWatcherHub, RejectsBadWords) {
  auto hub = UvmWatcherHub::create({});
  Word word;
  EXPECT_EQ(hub->watch(nullptr, [](uint64_t, uint64_t) { return true; }).status().code(), ErrorCode::kInvalidArgument);
  auto* misaligned = reinterpret_cast<const uint64_t*>(reinterpret_cast<const char*>(&word.v) + 1);
  EXPECT_EQ(hub->watch(misaligned, [](uint64_t, uint64_t) { return true; }).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(hub->watch(&word.v, nullptr).status().code(), ErrorCode::kInvalidArgument);
  hub->stop();
}

}  // namespace
}  // namespace fabric_lib::detail

// CompletionDispatcher: the engine's callback thread.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/completion_dispatcher.h"
#include "fabric_lib/completion.h"

namespace fabric_lib::detail {
namespace {

constexpr auto kWait = std::chrono::seconds(10);

// Posts from one producer run on the callback thread (not the poster's), in posting order.
TEST(CompletionDispatcher, PostsRunInOrderOnCallbackThread) {
  CompletionDispatcher d;
  EXPECT_FALSE(d.on_callback_thread());
  constexpr int kPosts = 10000;
  std::vector<int> order;  // only touched by the callback thread until `done`
  std::atomic<int> wrong_thread{0};
  const std::thread::id poster = std::this_thread::get_id();
  for (int i = 0; i < kPosts; ++i) {
    d.post([&, i] {
      if (!d.on_callback_thread() || std::this_thread::get_id() == poster) wrong_thread.fetch_add(1);
      order.push_back(i);
    });
  }
  std::promise<void> done;
  d.post([&] { done.set_value(); });
  ASSERT_EQ(done.get_future().wait_for(kWait), std::future_status::ready);
  EXPECT_EQ(wrong_thread.load(), 0);
  ASSERT_EQ(order.size(), static_cast<size_t>(kPosts));
  for (int i = 0; i < kPosts; ++i) ASSERT_EQ(order[i], i);
}

// A callback that throws (std::exception or anything else) is swallowed; later ones still run.
TEST(CompletionDispatcher, ThrowingCallbackIsSwallowed) {
  CompletionDispatcher d;
  std::atomic<int> ran{0};
  d.post([] { throw std::runtime_error("boom"); });
  d.post([&] { ran.fetch_add(1); });
  d.post([] { throw 42; });
  d.post([&] { ran.fetch_add(1); });
  std::promise<void> done;
  d.post([&] { done.set_value(); });
  ASSERT_EQ(done.get_future().wait_for(kWait), std::future_status::ready);
  EXPECT_EQ(ran.load(), 2);
}

// deliver(): a counter is bumped inline, before deliver() returns (done on Ok, errors otherwise);
// a callback runs later on the callback thread with the status it was given.
TEST(CompletionDispatcher, DeliverCountersInlineCallbacksOnThread) {
  CompletionDispatcher d;
  CompletionCounter counter;
  d.deliver(Completion::counter(counter), ok_status());
  EXPECT_EQ(counter.done.load(), 1u);
  EXPECT_EQ(counter.errors.load(), 0u);
  d.deliver(Completion::counter(counter), Status(ErrorCode::kCancelled, "x"));
  d.deliver(Completion::counter(counter), Status(ErrorCode::kProviderError, "y"));
  EXPECT_EQ(counter.done.load(), 1u);
  EXPECT_EQ(counter.errors.load(), 2u);

  std::promise<std::pair<bool, ErrorCode>> got;
  d.deliver(Completion::callback([&](const Status& s) { got.set_value({d.on_callback_thread(), s.code()}); }),
            Status(ErrorCode::kDeadlineExceeded, "late"));
  auto f = got.get_future();
  ASSERT_EQ(f.wait_for(kWait), std::future_status::ready);
  const auto [on_thread, code] = f.get();
  EXPECT_TRUE(on_thread);
  EXPECT_EQ(code, ErrorCode::kDeadlineExceeded);

  // Completion() (no sink) is accepted and reported to nobody.
  d.deliver(Completion(), Status(ErrorCode::kProviderError, "nobody listens"));
  d.deliver(Completion(), ok_status());
}

// A callback can post further callbacks (as completions that submit more work do); they run too.
TEST(CompletionDispatcher, CallbacksMayPost) {
  CompletionDispatcher d;
  std::promise<int> done;
  std::function<void(int)> chain = [&](int depth) {
    if (depth == 100) {
      done.set_value(depth);
      return;
    }
    d.post([&, depth] { chain(depth + 1); });
  };
  d.post([&] { chain(0); });
  auto f = done.get_future();
  ASSERT_EQ(f.wait_for(kWait), std::future_status::ready);
  EXPECT_EQ(f.get(), 100);
}

// shutdown() runs everything queued before it, before it returns; it is idempotent; posts and
// callback deliveries afterwards run inline on the caller.
TEST(CompletionDispatcher, ShutdownDrainsThenRunsInline) {
  CompletionDispatcher d;
  std::atomic<int> ran{0};
  std::promise<void> first_started;
  std::atomic<bool> release_first{false};
  d.post([&] {
    first_started.set_value();
    while (!release_first.load()) std::this_thread::yield();
    ran.fetch_add(1);
  });
  ASSERT_EQ(first_started.get_future().wait_for(kWait), std::future_status::ready);
  // The callback thread is busy: these stay queued.
  for (int i = 0; i < 1000; ++i) d.post([&] { ran.fetch_add(1); });
  std::thread releaser([&] { release_first.store(true); });
  d.shutdown();
  releaser.join();
  EXPECT_EQ(ran.load(), 1001);
  d.shutdown();  // idempotent
  EXPECT_FALSE(d.on_callback_thread());

  std::thread::id ran_on;
  d.post([&] {
    ran_on = std::this_thread::get_id();
    ran.fetch_add(1);
  });
  EXPECT_EQ(ran.load(), 1002) << "a post after shutdown must run before post() returns";
  EXPECT_EQ(ran_on, std::this_thread::get_id());

  ErrorCode delivered = ErrorCode::kOk;
  d.deliver(Completion::callback([&](const Status& s) { delivered = s.code(); }), Status(ErrorCode::kCancelled, "c"));
  EXPECT_EQ(delivered, ErrorCode::kCancelled);
  // A throwing callback after shutdown is swallowed as well.
  d.post([] { throw std::runtime_error("late boom"); });
}

// The destructor drains like shutdown(): nothing posted is lost.
TEST(CompletionDispatcher, DestructorRunsQueuedCallbacks) {
  std::atomic<int> ran{0};
  {
    CompletionDispatcher d;
    for (int i = 0; i < 500; ++i) d.post([&] { ran.fetch_add(1); });
  }
  EXPECT_EQ(ran.load(), 500);
}

// After a batch of callbacks the thread reaps (set_reaper) while reaping finds events, stops
// kReapBudget after the last one, and says so once per stop (`parked`: the workers stop standing
// by for it then, instead of after their own window).
TEST(CompletionDispatcher, TheReaperSaysWhenItParks) {
  using Clock = std::chrono::steady_clock;
  CompletionDispatcher d;
  std::atomic<int> reaps{0}, found{0}, parks{0}, reaps_at_park{0}, wrong_thread{0};
  std::promise<void> first_park, second_park;
  std::atomic<int> events_left{3};
  std::atomic<Clock::rep> last_event{0}, parked_at{0};
  d.set_reaper(
      [&] {
        if (!d.on_callback_thread()) wrong_thread.fetch_add(1);
        reaps.fetch_add(1);
        if (events_left.load() > 0) {
          events_left.fetch_sub(1);
          found.fetch_add(1);
          last_event.store(Clock::now().time_since_epoch().count());
          return size_t{1};
        }
        return size_t{0};
      },
      [&] {
        if (!d.on_callback_thread()) wrong_thread.fetch_add(1);
        const int n = parks.load() + 1;  // only this thread changes it
        if (n == 1) {  // the first stop's figures (the second would overwrite them)
          reaps_at_park.store(reaps.load());
          parked_at.store(Clock::now().time_since_epoch().count());
        }
        parks.fetch_add(1);
        if (n == 1) first_park.set_value();
        if (n == 2) second_park.set_value();
      });
  d.post([] {});
  ASSERT_EQ(first_park.get_future().wait_for(kWait), std::future_status::ready);
  EXPECT_EQ(found.load(), 3);  // it kept reaping while reaping found events
  EXPECT_GT(reaps_at_park.load(), 3);
  EXPECT_GE(Clock::duration(parked_at.load() - last_event.load()), CompletionDispatcher::kReapBudget);
  // The next batch: it runs before any further reaping (none while parked), then the thread
  // reaps again and parks again.
  std::atomic<int> reaps_seen{-1}, parks_seen{-1};
  d.post([&] {
    reaps_seen.store(reaps.load());
    parks_seen.store(parks.load());
  });
  ASSERT_EQ(second_park.get_future().wait_for(kWait), std::future_status::ready);
  EXPECT_EQ(reaps_seen.load(), reaps_at_park.load()) << "reaped while parked";
  EXPECT_EQ(parks_seen.load(), 1) << "parked again without a new callback";
  EXPECT_EQ(parks.load(), 2);
  EXPECT_EQ(wrong_thread.load(), 0);
  d.shutdown();
}

// Several producer threads: every posted callback runs exactly once, and each producer's
// callbacks run in its posting order.
TEST(CompletionDispatcher, ManyProducersEachFifo) {
  constexpr int kProducers = 4;
  constexpr int kPerProducer = 5000;
  std::vector<int> next(kProducers, 0);  // callback thread only
  std::atomic<int> out_of_order{0};
  {
    CompletionDispatcher d;
    std::vector<std::thread> producers;
    for (int p = 0; p < kProducers; ++p) {
      producers.emplace_back([&, p] {
        for (int i = 0; i < kPerProducer; ++i) {
          d.post([&, p, i] {
            if (next[p] != i) out_of_order.fetch_add(1);
            next[p] = i + 1;
          });
        }
      });
    }
    for (auto& t : producers) t.join();
    d.shutdown();
  }
  EXPECT_EQ(out_of_order.load(), 0);
  for (int p = 0; p < kProducers; ++p) EXPECT_EQ(next[p], kPerProducer) << p;
}

}  // namespace
}  // namespace fabric_lib::detail

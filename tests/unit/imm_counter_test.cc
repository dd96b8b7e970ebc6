// ImmCounter: counting imms by value without assuming any order of arrival.
// Standalone counters (null dispatcher) deliver sinks inline on the calling thread.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "core/completion_dispatcher.h"
#include "fabric_lib/completion.h"
#include "core/imm_count_table.h"

namespace fabric_lib {
namespace {

// Records every status a callback sink receives.
struct Recorder {
  std::mutex mu;
  std::vector<Status> calls;
  Completion sink() {
    return Completion::callback([this](const Status& s) {
      std::lock_guard lock(mu);
      calls.push_back(s);
    });
  }
  size_t size() {
    std::lock_guard lock(mu);
    return calls.size();
  }
};

// Early arrivals are counted; an expect() that is already satisfied fires at once and consumes.
TEST(ImmCounter, EarlyArrivalsFireImmediately) {
  detail::ImmCountTable c(16);
  EXPECT_EQ(c.count(7), 0u);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(c.add(7).ok());
  EXPECT_EQ(c.count(7), 3u);
  EXPECT_EQ(c.size(), 1u);
  CompletionCounter done;
  ASSERT_TRUE(c.expect(7, 3, Completion::counter(done)).ok());
  EXPECT_EQ(done.done.load(), 1u);  // inline
  EXPECT_EQ(done.errors.load(), 0u);
  EXPECT_EQ(c.count(7), 0u);
  EXPECT_FALSE(c.has_expectation(7));
  EXPECT_EQ(c.size(), 0u);  // freed
}

// An expectation set before the imms arrive fires exactly once, when the n-th arrives.
TEST(ImmCounter, ExpectBeforeArrivalFiresOnceWhenReached) {
  detail::ImmCountTable c(16);
  Recorder rec;
  ASSERT_TRUE(c.expect(9, 4, rec.sink()).ok());
  EXPECT_TRUE(c.has_expectation(9));
  EXPECT_EQ(c.size(), 1u);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(c.add(9).ok());
    EXPECT_EQ(rec.size(), 0u) << "fired after " << i + 1;
    EXPECT_EQ(c.count(9), static_cast<uint64_t>(i + 1));
  }
  ASSERT_TRUE(c.add(9).ok());
  ASSERT_EQ(rec.size(), 1u);
  EXPECT_TRUE(rec.calls[0].ok());
  EXPECT_EQ(c.count(9), 0u);
  EXPECT_FALSE(c.has_expectation(9));
  EXPECT_EQ(c.size(), 0u);
  // Later arrivals are counted again, never re-fire the old sink.
  ASSERT_TRUE(c.add(9).ok());
  EXPECT_EQ(rec.size(), 1u);
  EXPECT_EQ(c.count(9), 1u);
}

// add(imm, n) with n > 1 counts n at once and crosses the threshold in one step.
TEST(ImmCounter, AddManyAtOnce) {
  detail::ImmCountTable c(16);
  CompletionCounter done;
  ASSERT_TRUE(c.expect(1, 10, Completion::counter(done)).ok());
  ASSERT_TRUE(c.add(1, 4).ok());
  EXPECT_EQ(done.finished(), 0u);
  ASSERT_TRUE(c.add(1, 9).ok());
  EXPECT_EQ(done.done.load(), 1u);
  EXPECT_EQ(c.count(1), 3u);  // 13 - 10
}

// expect() consumes exactly n; the surplus stays counted for the next expectation.
TEST(ImmCounter, ConsumesOnlyN) {
  detail::ImmCountTable c(16);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(c.add(42).ok());
  CompletionCounter first, second, third;
  ASSERT_TRUE(c.expect(42, 3, Completion::counter(first)).ok());
  EXPECT_EQ(first.done.load(), 1u);
  EXPECT_EQ(c.count(42), 2u);
  EXPECT_EQ(c.size(), 1u);
  ASSERT_TRUE(c.expect(42, 2, Completion::counter(second)).ok());
  EXPECT_EQ(second.done.load(), 1u);
  EXPECT_EQ(c.count(42), 0u);
  EXPECT_EQ(c.size(), 0u);
  // A third expectation waits for new arrivals.
  ASSERT_TRUE(c.expect(42, 1, Completion::counter(third)).ok());
  EXPECT_EQ(third.finished(), 0u);
  ASSERT_TRUE(c.add(42).ok());
  EXPECT_EQ(third.done.load(), 1u);
  EXPECT_EQ(first.done.load() + second.done.load(), 2u);  // nobody fired twice
}

// Values are counted independently.
TEST(ImmCounter, ValuesAreIndependent) {
  detail::ImmCountTable c(1024);
  std::vector<CompletionCounter> counters(100);
  for (uint32_t v = 0; v < 100; ++v) ASSERT_TRUE(c.expect(v * 7919, v + 1, Completion::counter(counters[v])).ok());
  for (uint32_t v = 0; v < 100; ++v) ASSERT_TRUE(c.add(v * 7919, v).ok());
  for (uint32_t v = 0; v < 100; ++v) {
    EXPECT_EQ(counters[v].finished(), 0u) << v;
    EXPECT_EQ(c.count(v * 7919), v) << v;
  }
  for (uint32_t v = 0; v < 100; ++v) ASSERT_TRUE(c.add(v * 7919).ok());
  for (uint32_t v = 0; v < 100; ++v) {
    EXPECT_EQ(counters[v].done.load(), 1u) << v;
    EXPECT_EQ(c.count(v * 7919), 0u) << v;
  }
  EXPECT_EQ(c.size(), 0u);
}

// expect(imm, 0) is an invalid argument and leaves no trace.
TEST(ImmCounter, ExpectZeroIsInvalid) {
  detail::ImmCountTable c(4);
  CompletionCounter done;
  Status s = c.expect(3, 0, Completion::counter(done));
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_FALSE(c.has_expectation(3));
  EXPECT_EQ(c.size(), 0u);
  EXPECT_EQ(done.finished(), 0u);
}

// A second pending expectation for the same value is refused; the first stays intact.
TEST(ImmCounter, SecondExpectationIsAlreadyExists) {
  detail::ImmCountTable c(4);
  CompletionCounter first, second;
  ASSERT_TRUE(c.expect(5, 2, Completion::counter(first)).ok());
  Status s = c.expect(5, 1, Completion::counter(second));
  EXPECT_EQ(s.code(), ErrorCode::kAlreadyExists);
  EXPECT_EQ(c.size(), 1u);
  ASSERT_TRUE(c.add(5).ok());
  EXPECT_EQ(first.finished(), 0u);
  EXPECT_EQ(second.finished(), 0u);
  ASSERT_TRUE(c.add(5).ok());
  EXPECT_EQ(first.done.load(), 1u);
  EXPECT_EQ(second.finished(), 0u);  // the refused sink is never called
}

// release() cancels a pending expectation (Cancelled, once) and forgets the count.
TEST(ImmCounter, ReleaseCancelsAndForgets) {
  detail::ImmCountTable c(4);
  Recorder rec;
  ASSERT_TRUE(c.add(8, 3).ok());
  ASSERT_TRUE(c.expect(8, 10, rec.sink()).ok());
  EXPECT_EQ(c.count(8), 3u);
  ASSERT_TRUE(c.release(8).ok());
  ASSERT_EQ(rec.size(), 1u);
  EXPECT_EQ(rec.calls[0].code(), ErrorCode::kCancelled);
  EXPECT_EQ(c.count(8), 0u);
  EXPECT_FALSE(c.has_expectation(8));
  EXPECT_EQ(c.size(), 0u);
  // The value is reusable afresh.
  ASSERT_TRUE(c.add(8).ok());
  EXPECT_EQ(c.count(8), 1u);
  EXPECT_EQ(rec.size(), 1u);
  // release() of a value with a count only.
  ASSERT_TRUE(c.release(8).ok());
  EXPECT_EQ(c.count(8), 0u);
  EXPECT_EQ(c.size(), 0u);
}

// release() of a value the counter does not know is NotFound.
TEST(ImmCounter, ReleaseUnknownIsNotFound) {
  detail::ImmCountTable c(4);
  EXPECT_EQ(c.release(123).code(), ErrorCode::kNotFound);
  ASSERT_TRUE(c.add(123).ok());
  ASSERT_TRUE(c.release(123).ok());
  EXPECT_EQ(c.release(123).code(), ErrorCode::kNotFound);  // already forgotten
}

// With capacity 2, a third distinct value is dropped: add() says ResourceExhausted, the
// overflow count grows, the handler sees the imm; known values keep counting.
TEST(ImmCounter, OverflowIsReported) {
  detail::ImmCountTable c(2);
  EXPECT_EQ(c.capacity(), 2u);
  std::vector<uint32_t> overflowed;
  std::vector<ErrorCode> codes;
  c.set_overflow_handler([&](uint32_t imm, const Status& why) {
    overflowed.push_back(imm);
    codes.push_back(why.code());
  });
  ASSERT_TRUE(c.add(1).ok());
  ASSERT_TRUE(c.add(2).ok());
  EXPECT_EQ(c.size(), 2u);
  Status s = c.add(3);
  EXPECT_EQ(s.code(), ErrorCode::kResourceExhausted);
  EXPECT_EQ(c.overflow_count(), 1u);
  ASSERT_EQ(overflowed.size(), 1u);
  EXPECT_EQ(overflowed[0], 3u);
  EXPECT_EQ(codes[0], ErrorCode::kResourceExhausted);
  EXPECT_EQ(c.count(3), 0u);
  EXPECT_EQ(c.size(), 2u);
  // Known values still count.
  ASSERT_TRUE(c.add(1).ok());
  EXPECT_EQ(c.count(1), 2u);
  EXPECT_EQ(c.overflow_count(), 1u);
  // A second drop.
  EXPECT_EQ(c.add(4).code(), ErrorCode::kResourceExhausted);
  EXPECT_EQ(c.overflow_count(), 2u);
  ASSERT_EQ(overflowed.size(), 2u);
  EXPECT_EQ(overflowed[1], 4u);
}

// expect() on a full table (for a new value) is ResourceExhausted; after a slot frees, it works.
TEST(ImmCounter, ExpectOnFullTable) {
  detail::ImmCountTable c(2);
  ASSERT_TRUE(c.add(1).ok());
  CompletionCounter a, b;
  ASSERT_TRUE(c.expect(2, 1, Completion::counter(a)).ok());
  EXPECT_EQ(c.size(), 2u);
  EXPECT_EQ(c.expect(3, 1, Completion::counter(b)).code(), ErrorCode::kResourceExhausted);
  EXPECT_FALSE(c.has_expectation(3));
  EXPECT_EQ(c.size(), 2u);
  // An expectation on a value already in the table still works.
  ASSERT_TRUE(c.expect(1, 1, Completion::counter(b)).ok());
  EXPECT_EQ(b.done.load(), 1u);
  EXPECT_EQ(c.size(), 1u);  // value 1 consumed and freed
  CompletionCounter d;
  ASSERT_TRUE(c.expect(3, 1, Completion::counter(d)).ok());
  EXPECT_EQ(c.size(), 2u);
}

// Table slots are returned whenever a value's count drops to 0 with no expectation pending,
// so a long stream of distinct values never fills a small table.
TEST(ImmCounter, EntriesAreFreed) {
  detail::ImmCountTable c(3);
  for (uint32_t v = 0; v < 1000; ++v) {
    CompletionCounter done;
    ASSERT_TRUE(c.expect(v, 2, Completion::counter(done)).ok()) << v;
    ASSERT_TRUE(c.add(v).ok()) << v;
    ASSERT_TRUE(c.add(v).ok()) << v;
    ASSERT_EQ(done.done.load(), 1u) << v;
    ASSERT_EQ(c.size(), 0u) << v;
  }
  for (uint32_t v = 0; v < 1000; ++v) {
    ASSERT_TRUE(c.add(v + 5000).ok());
    CompletionCounter done;
    ASSERT_TRUE(c.expect(v + 5000, 1, Completion::counter(done)).ok());
    ASSERT_EQ(done.done.load(), 1u);
    ASSERT_EQ(c.size(), 0u);
  }
  EXPECT_EQ(c.overflow_count(), 0u);
}

// shutdown(why) ends every pending expectation with `why`; later expect() calls are Stopped.
TEST(ImmCounter, ShutdownEndsPendingExpectations) {
  detail::ImmCountTable c(16);
  Recorder a, b;
  CompletionCounter ctr;
  ASSERT_TRUE(c.expect(1, 5, a.sink()).ok());
  ASSERT_TRUE(c.expect(2, 1, b.sink()).ok());
  ASSERT_TRUE(c.expect(3, 2, Completion::counter(ctr)).ok());
  ASSERT_TRUE(c.add(1, 2).ok());
  ASSERT_TRUE(c.add(4).ok());
  c.shutdown(Status(ErrorCode::kPeerUnreachable, "test shutdown"));
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(a.calls[0].code(), ErrorCode::kPeerUnreachable);
  EXPECT_EQ(b.calls[0].code(), ErrorCode::kPeerUnreachable);
  EXPECT_EQ(ctr.errors.load(), 1u);
  EXPECT_EQ(ctr.done.load(), 0u);
  EXPECT_FALSE(c.has_expectation(1));
  CompletionCounter late;
  EXPECT_EQ(c.expect(4, 1, Completion::counter(late)).code(), ErrorCode::kStopped);
  EXPECT_EQ(c.expect(99, 1, Completion::counter(late)).code(), ErrorCode::kStopped);
  EXPECT_EQ(late.finished(), 0u);
  // Arrivals after shutdown fire nothing that was already ended.
  ASSERT_TRUE(c.add(1, 10).ok());
  EXPECT_EQ(a.size(), 1u);
  EXPECT_EQ(c.count(1), 12u);
}

// The observer sees every arrival (n calls for add(imm, n)) and never changes the counts.
TEST(ImmCounter, ObserverSeesEveryAdd) {
  detail::ImmCountTable c(16);
  std::vector<uint32_t> seen;
  c.set_observer([&](uint32_t imm) { seen.push_back(imm); });
  CompletionCounter done;
  ASSERT_TRUE(c.expect(10, 3, Completion::counter(done)).ok());
  ASSERT_TRUE(c.add(10).ok());
  ASSERT_TRUE(c.add(11, 2).ok());
  ASSERT_TRUE(c.add(10, 2).ok());
  EXPECT_EQ((std::vector<uint32_t>{10, 11, 11, 10, 10}), seen);
  EXPECT_EQ(done.done.load(), 1u);
  EXPECT_EQ(c.count(11), 2u);
  EXPECT_EQ(c.count(10), 0u);
  // Clearing it stops the calls.
  c.set_observer(nullptr);
  ASSERT_TRUE(c.add(12).ok());
  EXPECT_EQ(seen.size(), 5u);
  EXPECT_EQ(c.count(12), 1u);
}

// With a dispatcher, sinks and the observer run on the callback thread, never inline.
TEST(ImmCounter, DispatcherDeliversOnCallbackThread) {
  detail::CompletionDispatcher dispatcher;
  {
    detail::ImmCountTable c(16, &dispatcher);
    std::promise<bool> sink_thread, observer_thread;
    std::atomic<int> observer_calls{0};
    c.set_observer([&](uint32_t) {
      if (observer_calls.fetch_add(1) == 0) observer_thread.set_value(dispatcher.on_callback_thread());
    });
    ASSERT_TRUE(c.expect(1, 1, Completion::callback([&](const Status& s) {
                               sink_thread.set_value(s.ok() && dispatcher.on_callback_thread());
                             }))
                    .ok());
    ASSERT_TRUE(c.add(1).ok());
    auto f1 = sink_thread.get_future();
    auto f2 = observer_thread.get_future();
    ASSERT_EQ(f1.wait_for(std::chrono::seconds(10)), std::future_status::ready);
    ASSERT_EQ(f2.wait_for(std::chrono::seconds(10)), std::future_status::ready);
    EXPECT_TRUE(f1.get());
    EXPECT_TRUE(f2.get());
    dispatcher.shutdown();
    EXPECT_EQ(observer_calls.load(), 1);
  }
}

// Thread safety: the overflow handler may call back into the counter (e.g. to release an old
// value and make room) without deadlocking. Runs on a helper thread so a deadlock fails the
// test instead of hanging the suite (the counter is leaked in that case).
TEST(ImmCounter, OverflowHandlerMayCallTheCounter) {
  auto* c = new detail::ImmCountTable(1);
  auto seen_count = std::make_shared<std::atomic<uint64_t>>(999);
  c->set_overflow_handler([c, seen_count](uint32_t imm, const Status&) {
    *seen_count = c->count(imm);  // same value, hence the same shard lock as add() holds
  });
  ASSERT_TRUE(c->add(1).ok());
  auto done = std::make_shared<std::promise<Status>>();
  std::future<Status> result = done->get_future();
  std::thread([c, done] { done->set_value(c->add(2)); }).detach();
  if (result.wait_for(std::chrono::seconds(2)) != std::future_status::ready) {
    ADD_FAILURE() << "add() of an overflowing imm deadlocked: the overflow handler runs under the shard lock";
    return;  // leak `c`: its mutex is still held by the stuck thread
  }
  EXPECT_EQ(result.get().code(), ErrorCode::kResourceExhausted);
  EXPECT_EQ(seen_count->load(), 0u);
  delete c;
}

// Concurrency: 4 threads add() one value 20000 times each while another thread sets
// expect(imm, 80000) at a random moment: the sink fires exactly once and nothing is left over.
TEST(ImmCounter, ConcurrentAddsAndExpect) {
  std::mt19937 rng(8);
  for (int round = 0; round < 4; ++round) {
    detail::ImmCountTable c(64);
    constexpr uint32_t kImm = 0xdeadbeef;
    constexpr int kThreads = 4;
    constexpr int kPerThread = 20000;
    CompletionCounter sink;
    std::atomic<int> adds_done{0};
    std::atomic<bool> go{false};
    const int expect_after = static_cast<int>(rng() % (kThreads * kPerThread));
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&] {
        while (!go.load(std::memory_order_acquire)) {
        }
        for (int i = 0; i < kPerThread; ++i) {
          ASSERT_TRUE(c.add(kImm).ok());
          adds_done.fetch_add(1, std::memory_order_relaxed);
        }
      });
    }
    std::atomic<bool> expect_ok{false};
    threads.emplace_back([&] {
      while (!go.load(std::memory_order_acquire)) {
      }
      while (adds_done.load(std::memory_order_relaxed) < expect_after) std::this_thread::yield();
      expect_ok = c.expect(kImm, uint64_t{kThreads} * kPerThread, Completion::counter(sink)).ok();
    });
    go.store(true, std::memory_order_release);
    for (auto& th : threads) th.join();
    EXPECT_TRUE(expect_ok.load()) << "round " << round;
    EXPECT_EQ(sink.done.load(), 1u) << "round " << round << ", expect after " << expect_after;
    EXPECT_EQ(sink.errors.load(), 0u);
    EXPECT_EQ(c.count(kImm), 0u);
    EXPECT_FALSE(c.has_expectation(kImm));
    EXPECT_EQ(c.size(), 0u);
  }
}

// Concurrency over many values: threads add to disjoint and shared values while expectations are
// set concurrently; every expectation fires exactly once and the table ends empty.
TEST(ImmCounter, ConcurrentManyValues) {
  detail::ImmCountTable c(1024);
  constexpr uint32_t kValues = 256;
  constexpr int kThreads = 4;
  constexpr int kRepeats = 50;
  std::vector<CompletionCounter> sinks(kValues);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      std::vector<uint32_t> order;
      for (uint32_t v = 0; v < kValues; ++v)
        for (int r = 0; r < kRepeats; ++r) order.push_back(v);
      std::shuffle(order.begin(), order.end(), rng);
      for (uint32_t v : order) ASSERT_TRUE(c.add(v * 2654435761u).ok());
    });
  }
  threads.emplace_back([&] {
    for (uint32_t v = 0; v < kValues; ++v) {
      ASSERT_TRUE(c.expect(v * 2654435761u, kThreads * kRepeats, Completion::counter(sinks[v])).ok());
    }
  });
  for (auto& th : threads) th.join();
  for (uint32_t v = 0; v < kValues; ++v) {
    EXPECT_EQ(sinks[v].done.load(), 1u) << v;
    EXPECT_EQ(c.count(v * 2654435761u), 0u) << v;
  }
  EXPECT_EQ(c.size(), 0u);
  EXPECT_EQ(c.overflow_count(), 0u);
}

}  // namespace
}  // namespace fabric_lib

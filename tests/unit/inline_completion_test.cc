// Completion::inline_callback: the callback runs exactly once, on the thread that ends the
// operation — not on the callback thread, so it does not wait behind a callback that blocks — and
// a deadline ends it there too.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "fabric_lib/fabric_lib.h"

namespace fabric_lib {
namespace {

using namespace std::chrono_literals;

struct Pair {
  std::unique_ptr<TransferEngine> source, target;
  std::vector<uint8_t> inbox = std::vector<uint8_t>(1 << 20, 0), data = std::vector<uint8_t>(1 << 20, 5);
  MrRegistration src, dst;
};

Pair make_pair() {
  Pair p;
  auto target = TransferEngineBuilder().provider("tcp").interfaces({"lo"}).build();
  auto source = TransferEngineBuilder().provider("tcp").interfaces({"lo"}).build();
  EXPECT_TRUE(target.ok() && source.ok());
  p.target = std::move(target).value();
  p.source = std::move(source).value();
  auto dst = p.target->register_memory(p.inbox.data(), p.inbox.size(), Access::kRemoteWrite);
  auto src = p.source->register_memory(p.data.data(), p.data.size(), Access::kLocalOnly);
  EXPECT_TRUE(dst.ok() && src.ok());
  p.dst = *dst;
  p.src = *src;
  return p;
}

TEST(InlineCompletion, WithoutAFunctionNobodyIsTold) {
  EXPECT_EQ(Completion::inline_callback(nullptr).kind(), Completion::Kind::kNone);
  EXPECT_EQ(Completion::inline_callback([](const Status&) {}).kind(), Completion::Kind::kInline);
}

// While a callback holds the callback thread (until the test lets it go), 200 writes with inline
// callbacks all end, each once, none of them on that thread.
TEST(InlineCompletion, RunsOnceOnTheEndingThreadNotBehindABlockedCallback) {
  Pair p = make_pair();
  std::mutex mu;
  std::condition_variable cv;
  bool blocked = false, release = false;
  std::thread::id callback_thread;
  auto slow = p.source->submit_write({p.src.handle, 0, p.dst.desc, 0, 4096}, Completion::callback([&](const Status&) {
                                       std::unique_lock lock(mu);
                                       callback_thread = std::this_thread::get_id();
                                       blocked = true;
                                       cv.notify_all();
                                       cv.wait_for(lock, 60s, [&] { return release; });  // bounded: never a hang
                                     }));
  ASSERT_TRUE(slow.ok()) << slow.status().to_string();
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, 20s, [&] { return blocked; }));
  }

  constexpr int kWrites = 200;
  std::vector<int> calls(kWrites, 0);
  std::vector<std::thread::id> threads;
  int ok = 0, ended = 0;
  for (int i = 0; i < kWrites; ++i) {
    const uint64_t off = 4096 * (1 + i % 200);
    auto id = p.source->submit_write({p.src.handle, off, p.dst.desc, off, 4096},
                                     Completion::inline_callback([&, i](const Status& s) {
                                       std::lock_guard lock(mu);
                                       ++calls[i];
                                       threads.push_back(std::this_thread::get_id());
                                       if (s.ok()) ++ok;
                                       ++ended;
                                       cv.notify_all();
                                     }));
    ASSERT_TRUE(id.ok()) << id.status().to_string();
  }
  {
    // Every one ends while the callback thread is still held: they never needed it.
    std::unique_lock lock(mu);
    EXPECT_TRUE(cv.wait_for(lock, 20s, [&] { return ended == kWrites; })) << ended << " of " << kWrites << " ended";
    EXPECT_FALSE(release);
    EXPECT_EQ(ok, kWrites);
    release = true;
    cv.notify_all();
  }
  // stop() returns once every callback ran and nothing more can come.
  ASSERT_TRUE(p.source->stop().ok());
  std::lock_guard lock(mu);
  for (int i = 0; i < kWrites; ++i) EXPECT_EQ(calls[i], 1) << "write " << i;
  for (const std::thread::id& t : threads) EXPECT_NE(t, callback_thread);
}

// An imm expectation that is never met ends with DeadlineExceeded through its inline callback,
// once.
TEST(InlineCompletion, ADeadlineEndsItInline) {
  Pair p = make_pair();
  std::mutex mu;
  std::condition_variable cv;
  int calls = 0;
  ErrorCode code = ErrorCode::kOk;
  Completion sink = Completion::inline_callback([&](const Status& s) {
    std::lock_guard lock(mu);
    code = s.code();
    ++calls;
    cv.notify_all();
  });
  sink.with_deadline(Clock::now() + 50ms);
  ASSERT_TRUE(p.target->imms().expect(0xC0FFEE, 1, std::move(sink)).ok());
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, 20s, [&] { return calls > 0; }));
    EXPECT_EQ(code, ErrorCode::kDeadlineExceeded);
  }
  ASSERT_TRUE(p.target->stop().ok());  // ends every expectation: an unended one would report now
  std::lock_guard lock(mu);
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace fabric_lib

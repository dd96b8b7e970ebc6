// Completion::inline_callback: the callback runs exactly once, on the thread that ends the
// operation — not on the callback thread, so it does not wait behind a callback that is slow — and
// a deadline ends it there too.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
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

// While a callback holds the callback thread for 2 s, 200 writes with inline callbacks all end,
// each once, none of them on that thread.
TEST(InlineCompletion, RunsOnceOnTheEndingThreadNotBehindASlowCallback) {
  Pair p = make_pair();
  std::atomic<bool> slow_started{false};
  std::thread::id callback_thread;
  auto slow = p.source->submit_write({p.src.handle, 0, p.dst.desc, 0, 4096}, Completion::callback([&](const Status&) {
                                       callback_thread = std::this_thread::get_id();
                                       slow_started.store(true);
                                       std::this_thread::sleep_for(2s);
                                     }));
  ASSERT_TRUE(slow.ok()) << slow.status().to_string();
  for (int i = 0; i < 2000 && !slow_started.load(); ++i) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(slow_started.load());

  constexpr int kWrites = 200;
  std::mutex mu;
  std::vector<int> calls(kWrites, 0);
  std::vector<std::thread::id> threads;
  std::atomic<int> ok{0};
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kWrites; ++i) {
    const uint64_t off = 4096 * (1 + i % 200);
    auto id = p.source->submit_write({p.src.handle, off, p.dst.desc, off, 4096},
                                     Completion::inline_callback([&, i](const Status& s) {
                                       std::lock_guard lock(mu);
                                       ++calls[i];
                                       threads.push_back(std::this_thread::get_id());
                                       if (s.ok()) ok.fetch_add(1);
                                     }));
    ASSERT_TRUE(id.ok()) << id.status().to_string();
  }
  while (ok.load() < kWrites && std::chrono::steady_clock::now() - start < 10s) std::this_thread::sleep_for(1ms);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(ok.load(), kWrites);
  // Behind the slow callback they would have waited for it (2 s); inline they did not.
  EXPECT_LT(took, 1500ms);
  EXPECT_TRUE(slow_started.load());
  std::this_thread::sleep_for(50ms);  // nothing more arrives
  std::lock_guard lock(mu);
  for (int i = 0; i < kWrites; ++i) EXPECT_EQ(calls[i], 1) << "write " << i;
  for (const std::thread::id& t : threads) EXPECT_NE(t, callback_thread);
}

// An imm expectation that is never met ends with DeadlineExceeded through its inline callback.
TEST(InlineCompletion, ADeadlineEndsItInline) {
  Pair p = make_pair();
  std::atomic<int> calls{0};
  std::atomic<int> code{-1};
  Completion sink = Completion::inline_callback([&](const Status& s) {
    code.store(static_cast<int>(s.code()));
    calls.fetch_add(1);
  });
  sink.with_deadline(Clock::now() + 50ms);
  ASSERT_TRUE(p.target->imms().expect(0xC0FFEE, 1, std::move(sink)).ok());
  for (int i = 0; i < 5000 && calls.load() == 0; ++i) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(code.load(), static_cast<int>(ErrorCode::kDeadlineExceeded));
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(calls.load(), 1);
}

}  // namespace
}  // namespace fabric_lib

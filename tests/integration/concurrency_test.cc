// Thousands of requests in flight from several threads and from inside callbacks, and stop()
// with work in flight: every accepted request completes exactly once.
#include <thread>

#include "integration/engine_fixture.h"
#include "support/outcomes.h"

namespace fabric_lib::testing {
namespace {

using ConcurrencyTest = EngineTest;

// 4 threads submit 5000 small writes with imms (plus 200 more submitted from completion
// callbacks); each request's callback runs exactly once, every imm is counted and every byte lands.
TEST_P(ConcurrencyTest, ThousandsInFlightCompleteExactlyOnce) {
  constexpr size_t kThreads = 4, kPerThread = 1250, kChunk = 256, kChained = 200;
  constexpr size_t kTotal = kThreads * kPerThread;
  const size_t region = (kTotal + kChained) * kChunk;
  Outcomes out(kTotal + kChained);  // before the engine: callbacks use it
  std::atomic<size_t> chained{0};
  AgentProcess agent(GetParam(), region);
  ASSERT_TRUE(agent.started());
  auto engine = make_engine();
  ASSERT_TRUE(engine);
  SourceBuffer src(*engine, region, 51);
  Shadow shadow(region);
  shadow.write(src, 0, 0, region);

  auto submit = [&](size_t i, auto& self) -> void {
    WriteRequest w{src.reg.handle, i * kChunk, agent.desc(), i * kChunk, kChunk, 61};
    auto id = engine->submit_write(w, Completion::callback([&, i](const Status& s) {
      // The first completions each submit one more write from inside the callback.
      const size_t c = chained.fetch_add(1);
      if (c < kChained) self(kTotal + c, self);
      out.record(i, s);
    }));
    if (!id.ok()) ADD_FAILURE() << id.status().to_string();
  };
  std::vector<std::thread> threads;
  for (size_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (size_t k = 0; k < kPerThread; ++k) submit(t * kPerThread + k, submit);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_TRUE(out.all_ok());
  EXPECT_EQ(agent.hash(0, region), shadow.hash());
  EXPECT_EQ(agent.expect_exactly(61, kTotal + kChained), "ok");
  const EngineStats st = engine->stats();
  EXPECT_EQ(st.requests_submitted, kTotal + kChained);
  EXPECT_EQ(st.requests_completed, kTotal + kChained);
  expect_reordering_as_configured(*engine, &agent);
}

// stop() with thousands of writes queued or in flight: each completes exactly once, Ok or
// Cancelled; stop() returns; later submits are refused with Stopped.
TEST_P(ConcurrencyTest, StopWithWorkInFlightCancelsEachOnce) {
  constexpr size_t kRequests = 4000, kChunk = 64 * 1024;
  const size_t region = 4 << 20;
  Outcomes out(kRequests);  // before the engine: callbacks use it
  AgentProcess agent(GetParam(), region);
  ASSERT_TRUE(agent.started());
  auto engine = make_engine();
  ASSERT_TRUE(engine);
  SourceBuffer src(*engine, region, 52);
  for (size_t i = 0; i < kRequests; ++i) {
    const uint64_t off = (i * kChunk) % region;
    auto id = engine->submit_write({src.reg.handle, off, agent.desc(), off, kChunk, 62}, out.sink(i));
    ASSERT_TRUE(id.ok()) << id.status().to_string();
  }
  CompletionCounter pending_expectation;
  ASSERT_TRUE(engine->imms().expect(999, 1, Completion::counter(pending_expectation)).ok());
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(engine->stop().ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));
  // stop() returns after every callback ran (none comes later).
  EXPECT_EQ(out.finished.load(), kRequests);
  out.expect_exactly_once();
  EXPECT_EQ(out.count(ErrorCode::kOk) + out.count(ErrorCode::kCancelled), kRequests);
  EXPECT_GT(out.count(ErrorCode::kCancelled), 0u) << "stop() came too late to cancel anything";
  EXPECT_EQ(pending_expectation.errors, 1u);
  EXPECT_EQ(engine->submit_write({src.reg.handle, 0, agent.desc(), 0, 1}, Completion()).status().code(),
            ErrorCode::kStopped);
  EXPECT_EQ(engine->submit_imm(1, agent.desc(), Completion()).status().code(), ErrorCode::kStopped);
  EXPECT_TRUE(engine->stop().ok());  // idempotent
}

INSTANTIATE_TEST_SUITE_P(Matrix, ConcurrencyTest, ::testing::ValuesIn(provider_matrix()), matrix_name);

}  // namespace
}  // namespace fabric_lib::testing

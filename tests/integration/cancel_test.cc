// cancel(TransferId) between processes, over the whole provider matrix: after completion it is
// NotFound and the one completion stays the only one; during a transfer the request still
// completes exactly once (Cancelled when cancel took effect, Ok when it had finished first) and
// the target's count stops at no more than the request's imm count; racing stop() or the death
// of the target, every request completes exactly once.
#include <cstdio>
#include <map>
#include <mutex>
#include <thread>

#include "integration/engine_fixture.h"
#include "support/outcomes.h"

namespace fabric_lib::testing {
namespace {

using CancelTest = EngineTest;
using namespace std::chrono_literals;

// Reads the agent's count of `imm` until it holds still for three reads 30 ms apart (bounded).
uint64_t settled_count(AgentProcess& agent, uint32_t imm) {
  uint64_t last = agent.count(imm);
  int still = 0;
  for (int i = 0; i < 200 && still < 3; ++i) {
    std::this_thread::sleep_for(30ms);
    const uint64_t now = agent.count(imm);
    still = now == last ? still + 1 : 0;
    last = now;
  }
  EXPECT_GE(still, 3) << "imm " << imm << " kept changing";
  return last;
}

TEST_P(CancelTest, AfterCompletionItIsNotFoundAndTheOkStaysTheOnlyCompletion) {
  AgentProcess agent(GetParam(), 1 << 20);
  ASSERT_TRUE(agent.started());
  Outcomes out(1);
  auto engine = make_engine();
  ASSERT_TRUE(engine);
  SourceBuffer src(*engine, 1 << 20, 81);
  StopEngineFirst stop_first(engine.get());
  const WriteRequest w{src.reg.handle, 0, agent.desc(), 0, 300000, 820};
  Result<TransferId> id = engine->submit_write(w, out.sink(0));
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(out.wait_all(60s));
  EXPECT_EQ(engine->cancel(*id).code(), ErrorCode::kNotFound);
  EXPECT_EQ(engine->cancel(*id).code(), ErrorCode::kNotFound);
  // Ids this engine never issued, and 0.
  EXPECT_EQ(engine->cancel(0).code(), ErrorCode::kNotFound);
  EXPECT_EQ(engine->cancel(*id + (uint64_t{1} << 40)).code(), ErrorCode::kNotFound);
  EXPECT_TRUE(agent.expect_imms(820, imm_count_of(w, domains())));
  std::this_thread::sleep_for(100ms);  // no second completion shows up
  out.expect_exactly_once();
  EXPECT_EQ(out.count(ErrorCode::kOk), 1u);
  EXPECT_EQ(agent.hash(0, 300000), hash_hex(src.bytes.data(), 300000));
}

// Cancels a 2048-page request after a growing head start. cancel() returning Ok means it took
// effect (the request then ends Cancelled); NotFound means it had finished (Ok, every imm there).
TEST_P(CancelTest, DuringATransferItCompletesOnceAndTheCountStopsWithinTheRequest) {
  constexpr uint32_t kPages = 2048;
  constexpr uint64_t kPage = 4096;
  const size_t region = kPages * kPage;
  AgentProcess agent(GetParam(), region);
  ASSERT_TRUE(agent.started());
  constexpr size_t kTries = 6;
  Outcomes out(kTries);
  auto engine = make_engine();
  ASSERT_TRUE(engine);
  SourceBuffer src(*engine, region, 83);
  StopEngineFirst stop_first(engine.get());
  PagedWriteTemplate t{src.reg.handle, agent.desc(), kPage, kPage, kPage, 0, 0, kPages, kPages};
  Result<PreparedPagedWrites> prepared = engine->prepare_paged_writes(t);
  ASSERT_TRUE(prepared.ok()) << prepared.status().to_string();
  std::vector<uint32_t> pages(kPages);
  for (uint32_t p = 0; p < kPages; ++p) pages[p] = (p * 7) % kPages;  // a permutation
  const std::vector<std::chrono::microseconds> head_starts = {0us, 0us, 50us, 300us, 2000us, 20000us};
  std::map<ErrorCode, size_t> cancel_results;
  for (size_t i = 0; i < kTries; ++i) {
    const uint32_t imm = 830 + static_cast<uint32_t>(i);
    Result<TransferId> id = engine->submit_prepared(*prepared, pages, pages, imm, out.sink(i));
    ASSERT_TRUE(id.ok());
    const auto until = std::chrono::steady_clock::now() + head_starts[i];
    while (std::chrono::steady_clock::now() < until) {
    }
    const Status c = engine->cancel(*id);
    cancel_results[c.code()]++;
    ASSERT_TRUE(c.ok() || c.code() == ErrorCode::kNotFound) << c.to_string();
    const auto t0 = std::chrono::steady_clock::now();
    while (out.calls[i].load() == 0 && std::chrono::steady_clock::now() - t0 < 60s) std::this_thread::sleep_for(1ms);
    ASSERT_EQ(out.calls[i].load(), 1) << "try " << i;
    if (c.ok()) {
      EXPECT_EQ(engine->cancel(*id).code(), ErrorCode::kNotFound);  // it is over now
      const uint64_t arrived = settled_count(agent, imm);
      EXPECT_LE(arrived, imm_count_of_paged_writes(kPages)) << "try " << i;
      if (arrived > 0) {
        EXPECT_EQ(agent.call("release " + std::to_string(imm)), "ok");  // as an app would
      }
    } else {
      EXPECT_TRUE(agent.expect_imms(imm, imm_count_of_paged_writes(kPages))) << "try " << i;
      EXPECT_EQ(settled_count(agent, imm), 0u);
      EXPECT_EQ(agent.hash(0, region), hash_hex(src.bytes.data(), region));
    }
  }
  out.expect_exactly_once();
  std::printf("cancel took effect on %zu of %zu requests\n", cancel_results[ErrorCode::kOk], kTries);
  // The first tries (no head start) cancel a request with most of its 2048 WRs still to post.
  EXPECT_GE(cancel_results[ErrorCode::kOk], 1u) << "no cancel took effect: the test proved nothing";
  // Every Ok cancel ended its request Cancelled; every NotFound one had finished Ok.
  EXPECT_EQ(out.count(ErrorCode::kCancelled), cancel_results[ErrorCode::kOk]);
  EXPECT_EQ(out.count(ErrorCode::kOk), cancel_results[ErrorCode::kNotFound]);
}

// Cancels from one thread while another stops the engine: each request completes exactly once,
// Ok or Cancelled, and cancel answers Ok, NotFound or Stopped.
TEST_P(CancelTest, RacingStopEachRequestCompletesOnce) {
  constexpr size_t kRequests = 2000, kChunk = 16 * 1024;
  const size_t region = 4 << 20;
  AgentProcess agent(GetParam(), region);
  ASSERT_TRUE(agent.started());
  Outcomes out(kRequests);
  auto engine = make_engine();
  ASSERT_TRUE(engine);
  SourceBuffer src(*engine, region, 85);
  StopEngineFirst stop_first(engine.get());
  std::vector<TransferId> ids;
  for (size_t i = 0; i < kRequests; ++i) {
    const uint64_t off = (i * kChunk) % region;
    Result<TransferId> id = engine->submit_write({src.reg.handle, off, agent.desc(), off, kChunk, 840}, out.sink(i));
    ASSERT_TRUE(id.ok());
    ids.push_back(*id);
  }
  std::mutex mu;
  std::map<ErrorCode, size_t> answers;
  std::thread canceller([&] {
    for (size_t i = ids.size(); i-- > 0;) {
      const Status s = engine->cancel(ids[i]);
      std::lock_guard lock(mu);
      answers[s.code()]++;
    }
  });
  std::this_thread::sleep_for(std::chrono::microseconds(200));
  ASSERT_TRUE(engine->stop().ok());
  canceller.join();
  ASSERT_TRUE(out.wait_all(30s));
  out.expect_exactly_once();
  EXPECT_EQ(out.count(ErrorCode::kOk) + out.count(ErrorCode::kCancelled), kRequests);
  size_t answered = 0;
  for (const auto& [code, n] : answers) {
    EXPECT_TRUE(code == ErrorCode::kOk || code == ErrorCode::kNotFound || code == ErrorCode::kStopped)
        << error_code_name(code);
    answered += n;
  }
  EXPECT_EQ(answered, kRequests);
  EXPECT_EQ(engine->cancel(ids[0]).code(), ErrorCode::kStopped);
}

// kill -9 of the target while its requests are being cancelled: each completes exactly once
// with Ok, Cancelled or the peer's failure, and cancel answers Ok or NotFound (or the provider
// error of a group given up while stuck in shm, docs/failure-semantics.md).
TEST_P(CancelTest, RacingPeerDeathEachRequestCompletesOnce) {
  constexpr size_t kRequests = 3000, kChunk = 64 * 1024;
  const size_t region = 8 << 20;
  Outcomes out(kRequests);
  auto agent = std::make_unique<AgentProcess>(GetParam(), region);
  ASSERT_TRUE(agent->started());
  auto engine = GetParam().builder().stall_timeout(1s).peer_retry_interval(50ms).build();
  ASSERT_TRUE(engine.ok());
  SourceBuffer src(**engine, region, 87);
  StopEngineFirst stop_first(engine->get());
  std::vector<TransferId> ids;
  for (size_t i = 0; i < kRequests; ++i) {
    const uint64_t off = (i * kChunk) % region;
    Result<TransferId> id = (*engine)->submit_write({src.reg.handle, off, agent->desc(), off, kChunk, 850}, out.sink(i));
    ASSERT_TRUE(id.ok());
    ids.push_back(*id);
  }
  std::map<ErrorCode, size_t> answers;
  std::thread canceller([&] {
    for (size_t i = kRequests / 2; i < kRequests; ++i) answers[(*engine)->cancel(ids[i]).code()]++;
  });
  agent->kill_now();
  canceller.join();
  ASSERT_TRUE(out.wait_all(60s)) << out.finished.load() << " of " << kRequests;
  out.expect_exactly_once();
  const size_t failures = out.count(ErrorCode::kPeerUnreachable) + out.count(ErrorCode::kDomainDown) +
                          out.count(ErrorCode::kProviderError);
  EXPECT_EQ(out.count(ErrorCode::kOk) + out.count(ErrorCode::kCancelled) + failures, kRequests);
  const bool given_up = (*engine)->stats().groups_abandoned > 0;
  for (const auto& [code, n] : answers) {
    EXPECT_TRUE(code == ErrorCode::kOk || code == ErrorCode::kNotFound ||
                (given_up && code == ErrorCode::kProviderError))
        << error_code_name(code) << " x" << n;
  }
}

INSTANTIATE_TEST_SUITE_P(Matrix, CancelTest, ::testing::ValuesIn(provider_matrix()), matrix_name);

}  // namespace
}  // namespace fabric_lib::testing

// TransferEngine::progress(): a thread that polls the domains itself sees completions without the
// worker's hop — and each request still completes exactly once, whoever reaped it.
#include <thread>

#include "integration/engine_fixture.h"

namespace fabric_lib::testing {
namespace {

using CallerProgressTest = EngineTest;

constexpr size_t kWrites = 400;
constexpr uint64_t kBytes = 256;

// Drains `queue` into `seen` (one count per tag); returns how many it took.
size_t drain(CompletionQueue& queue, std::vector<uint32_t>& seen, size_t& errors) {
  CompletionQueue::Entry e[32];
  const size_t n = queue.poll(e, 32);
  for (size_t i = 0; i < n; ++i) {
    if (e[i].tag < seen.size()) ++seen[e[i].tag];
    if (!e[i].status.ok()) ++errors;
  }
  return n;
}

// One write at a time, each waited for by spinning on progress(): the caller reaps some of the
// completions itself (a no-op progress() would hand back 0 every time; on shm it must), every request completes
// exactly once, and the target counted every imm once.
TEST_P(CallerProgressTest, SpinningOnProgressReapsCompletionsExactlyOnce) {
  CompletionQueue queue;  // before the engine, which reports to it until stopped
  AgentProcess agent(GetParam(), kWrites * kBytes);
  ASSERT_TRUE(agent.started());
  auto engine = make_engine();
  ASSERT_TRUE(engine);
  SourceBuffer src(*engine, kWrites * kBytes, 91);
  StopEngineFirst stop_first(engine.get());
  std::vector<uint32_t> seen(kWrites, 0);
  size_t errors = 0, finished = 0, handled = 0;
  for (size_t i = 0; i < kWrites; ++i) {
    Result<TransferId> id = engine->submit_write({src.reg.handle, i * kBytes, agent.desc(), i * kBytes, kBytes, 13},
                                                 Completion::queue(queue, i));
    ASSERT_TRUE(id.ok()) << id.status().to_string();
    const auto deadline = std::chrono::steady_clock::now() + bounds::kRequests;
    while (finished < i + 1 && std::chrono::steady_clock::now() < deadline) {
      handled += engine->progress();
      finished += drain(queue, seen, errors);
    }
    ASSERT_EQ(finished, i + 1) << "write " << i << " did not complete";
  }
  // The quiet interval, still reaping on this thread: a duplicate completion would show here.
  const auto quiet_end = std::chrono::steady_clock::now() + bounds::kQuiet;
  while (std::chrono::steady_clock::now() < quiet_end) {
    handled += engine->progress();
    finished += drain(queue, seen, errors);
    std::this_thread::yield();
  }
  EXPECT_EQ(finished, kWrites);
  EXPECT_EQ(errors, 0u);
  for (size_t i = 0; i < kWrites; ++i) EXPECT_EQ(seen[i], 1u) << "request " << i;
  if (GetParam().provider == "shm") {
    // shm's calls may never return once a peer dies (DomainInfo::calls_may_hang_on_dead_peer):
    // the engine makes none of them on an application thread, so progress() does nothing there.
    EXPECT_EQ(handled, 0u) << "progress() made a provider call of shm on the caller's thread";
  } else {
    EXPECT_GT(handled, 0u) << "progress() never handled an event on the caller's thread";
  }
  EXPECT_LE(handled, 2 * kWrites) << "more events than the writes could have made";
  EXPECT_EQ(agent.expect_exactly(13, kWrites), "ok");
  EXPECT_EQ(agent.hash(0, kWrites * kBytes), hash_hex(src.bytes.data(), kWrites * kBytes));
  engine->stop();
  EXPECT_EQ(engine->progress(), 0u) << "progress() after stop()";
}

// While an application thread drives progress(), the worker leaves the reaping to it (it stands
// by, whatever its idle policy): the caller's progress() hands back every write's completion.
// A worker that kept polling beside it reaped a share of them and took the group's ownership
// from the caller each time.
TEST_P(CallerProgressTest, TheWorkerLeavesReapingToASpinningCaller) {
  // On shm only the worker calls the provider: progress() hands back nothing there.
  const bool shm = GetParam().provider == "shm";
  for (const IdlePolicy policy : {IdlePolicy::kAdaptive, IdlePolicy::kSpin}) {
    SCOPED_TRACE(policy == IdlePolicy::kSpin ? "kSpin" : "kAdaptive");
    CompletionCounter done;  // before the engine, which reports to it until stopped
    AgentProcess agent(GetParam(), kWrites * kBytes);
    ASSERT_TRUE(agent.started());
    auto built = GetParam().builder().idle_policy(policy).build();
    ASSERT_TRUE(built.ok()) << built.status().to_string();
    TransferEngine& engine = **built;
    SourceBuffer src(engine, kWrites * kBytes, 93);
    StopEngineFirst stop_first(&engine);
    size_t handled = 0;
    for (size_t i = 0; i < kWrites; ++i) {
      ASSERT_TRUE(engine.submit_write({src.reg.handle, i * kBytes, agent.desc(), i * kBytes, kBytes, 15},
                                      Completion::counter(done)).ok());
      const auto deadline = std::chrono::steady_clock::now() + bounds::kRequests;
      while (done.finished() < i + 1 && std::chrono::steady_clock::now() < deadline) handled += engine.progress();
      ASSERT_EQ(done.finished(), i + 1) << "write " << i << " did not complete";
    }
    EXPECT_EQ(done.errors.load(), 0u);
    // Every completion but a few (the first write's, before the worker saw the caller polling;
    // one a descheduled caller left past the stand-by window): a worker polling beside the
    // caller reaped 63-397 of the 400 under kSpin (tcp, ipc, udp;ofi_rxd x4).
    if (shm) {
      EXPECT_EQ(handled, 0u) << "progress() made a provider call of shm on the caller's thread";
    } else {
      EXPECT_GE(handled, kWrites * 9 / 10) << "the worker reaped what the caller's progress() was there for";
    }
    EXPECT_LE(handled, 2 * kWrites) << "more events than the writes could have made";
    EXPECT_EQ(agent.expect_exactly(15, kWrites), "ok");
  }
}

// With caller-thread operation off, progress() never touches a domain: the worker reaps all.
TEST_P(CallerProgressTest, OffWithoutCallerThreadOperation) {
  CompletionCounter done;  // before the engine, which reports to it until stopped
  AgentProcess agent(GetParam(), 64 * kBytes);
  ASSERT_TRUE(agent.started());
  auto built = GetParam().builder().post_on_caller_thread(false).build();
  ASSERT_TRUE(built.ok()) << built.status().to_string();
  TransferEngine& engine = **built;
  SourceBuffer src(engine, 64 * kBytes, 92);
  StopEngineFirst stop_first(&engine);
  size_t handled = 0;
  for (size_t i = 0; i < 64; ++i) {
    ASSERT_TRUE(engine.submit_write({src.reg.handle, i * kBytes, agent.desc(), i * kBytes, kBytes, 14},
                                    Completion::counter(done)).ok());
  }
  const auto deadline = std::chrono::steady_clock::now() + bounds::kRequests;
  while (done.finished() < 64 && std::chrono::steady_clock::now() < deadline) handled += engine.progress();
  EXPECT_EQ(done.done.load(), 64u);
  EXPECT_EQ(handled, 0u);
  EXPECT_EQ(agent.expect_exactly(14, 64), "ok");
}

INSTANTIATE_TEST_SUITE_P(Matrix, CallerProgressTest, ::testing::ValuesIn(provider_matrix()), matrix_name);

}  // namespace
}  // namespace fabric_lib::testing

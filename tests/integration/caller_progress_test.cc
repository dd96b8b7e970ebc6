// TransferEngine::progress(): a thread that polls the domains itself sees completions without the
// worker's hop — and each request still completes exactly once, whoever reaped it.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "integration/engine_fixture.h"

namespace fabric_lib::testing {
namespace {

using CallerProgressTest = EngineTest;

constexpr size_t kWrites = 400;
constexpr uint64_t kBytes = 256;

// How often the calling thread has lost its core to another thread so far (involuntary context
// switches, getrusage(RUSAGE_THREAD)).
size_t times_preempted() {
  rusage usage{};
  getrusage(RUSAGE_THREAD, &usage);
  return static_cast<size_t>(usage.ru_nivcsw);
}

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
    const size_t preempted_before = times_preempted();
    for (size_t i = 0; i < kWrites; ++i) {
      ASSERT_TRUE(engine.submit_write({src.reg.handle, i * kBytes, agent.desc(), i * kBytes, kBytes, 15},
                                      Completion::counter(done)).ok());
      const auto deadline = std::chrono::steady_clock::now() + bounds::kRequests;
      while (done.finished() < i + 1 && std::chrono::steady_clock::now() < deadline) handled += engine.progress();
      ASSERT_EQ(done.finished(), i + 1) << "write " << i << " did not complete";
    }
    const size_t preempted = times_preempted() - preempted_before;
    EXPECT_EQ(done.errors.load(), 0u);
    // Every completion but a few: the first write's (before the worker saw the caller polling),
    // 2 % besides, and one for each time the caller lost its core past the stand-by window (one
    // write is in flight at a time), up to 50. A worker polling beside the caller reaped 63-397
    // of the 400 under kSpin (tcp, ipc, udp;ofi_rxd x4), with no preemption needed — more than
    // the 59 this allows at most. (With three spinning processes on 2 cores the caller was
    // preempted 8-506 times a run and the worker reaped 0-29; a CI run with more test processes
    // than cores saw 41, which failed the flat 10 % bound used before.)
    if (shm) {
      EXPECT_EQ(handled, 0u) << "progress() made a provider call of shm on the caller's thread";
    } else {
      const size_t allowed = 1 + kWrites / 50 + std::min<size_t>(preempted, 50);
      EXPECT_GE(handled + allowed, kWrites) << "the worker reaped what the caller's progress() was there for ("
                                            << preempted << " preemptions of the caller)";
    }
    EXPECT_LE(handled, 2 * kWrites) << "more events than the writes could have made";
    EXPECT_EQ(agent.expect_exactly(15, kWrites), "ok");
  }
}

// A thread that called progress() once and then stops (the callback thread's reaper parking, an
// application between two batches) leaves nothing behind: a write it submits right after is
// completed by the worker, which had blocked before that thread polled. On ipc the write is a
// copy that only polls advance and that signals no fd; the submit, seeing a thread driving
// progress(), did not wake the worker, which slept out its block's 100 ms timeout (16 of 16
// writes, ~98 ms each, on ipc and on tcp_reordered, whose reorder stage holds completions the
// same way; a Python asyncio loop over ipc hit it on a quarter of its requests). Other
// providers' completions wake the worker through their queues' fds (tcp, udp), or their submits
// go through the worker (shm): the same bound holds there.
TEST_P(CallerProgressTest, AWriteRightAfterAProgressCallDoesNotWaitForABlockedWorker) {
  constexpr size_t kRounds = 16;
  constexpr uint64_t kWriteBytes = 256 * 1024;  // an ipc copy that is still running when the submit returns
  // Far below the worker's block timeout (IdleWaiter::kBlockTimeoutMs, 100 ms), far above a
  // wake-up; a loaded machine may stretch a round or two past it.
  constexpr auto kSlow = std::chrono::milliseconds(50);
  CompletionCounter done;  // before the engine, which reports to it until stopped
  AgentProcess agent(GetParam(), kWriteBytes);
  ASSERT_TRUE(agent.started());
  auto built = GetParam().builder().idle_policy(IdlePolicy::kAdaptive).build();
  ASSERT_TRUE(built.ok()) << built.status().to_string();
  TransferEngine& engine = **built;
  SourceBuffer src(engine, kWriteBytes, 94);
  StopEngineFirst stop_first(&engine);
  // A first write connects to the peer (tcp: the connection; ipc: the segment's mapping).
  ASSERT_TRUE(engine.submit_write({src.reg.handle, 0, agent.desc(), 0, kWriteBytes, 16, Pinned{0}},
                                  Completion::counter(done)).ok());
  wait_all(done, 1);
  ASSERT_EQ(done.finished(), 1u);
  size_t slow = 0;
  std::chrono::nanoseconds slowest{0};
  for (size_t i = 1; i <= kRounds; ++i) {
    // The engine idles, as between an application's batches, past the worker's spin budget
    // (IdleWaiter::kSpinBudget, 200 us), so the worker blocks. This is the case's premise, not a
    // wait for a result: a worker that has not blocked yet is served by the stand-by path, and the
    // round passes either way (it only tests less).
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    (void)engine.progress();  // finds nothing; marks this thread as the group's poller
    const auto start = std::chrono::steady_clock::now();
    // One WR (one domain), so the target counts one imm per write.
    ASSERT_TRUE(engine.submit_write({src.reg.handle, 0, agent.desc(), 0, kWriteBytes, 16, Pinned{0}},
                                    Completion::counter(done)).ok());
    ASSERT_TRUE(done.wait_for(i + 1, bounds::kRequests)) << "write " << i << " did not complete";  // no progress()
    const auto took = std::chrono::steady_clock::now() - start;
    slowest = std::max<std::chrono::nanoseconds>(slowest, took);
    if (took > kSlow) ++slow;
  }
  EXPECT_LE(slow, 2u) << "writes that waited for the worker's block timeout; the slowest took "
                      << std::chrono::duration_cast<std::chrono::microseconds>(slowest).count() << " us";
  EXPECT_EQ(done.errors.load(), 0u);
  EXPECT_EQ(agent.expect_exactly(16, kRounds + 1), "ok");
  EXPECT_EQ(agent.hash(0, kWriteBytes), hash_hex(src.bytes.data(), kWriteBytes));
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

// Failure semantics between real processes: deadlines, a paused or killed peer, a forged
// descriptor, and stop() on both sides. Every accepted request completes exactly once.
#include <signal.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>
#include <functional>

#include <map>
#include <mutex>

#include "integration/engine_fixture.h"
#include "support/eventually.h"
#include "support/outcomes.h"

namespace fabric_lib::testing {
namespace {

using FailureTest = EngineTest;
using namespace std::chrono_literals;

// The configurations of the matrix for which `keep` holds.
std::vector<ProviderConfig> matrix_where(const std::function<bool(const ProviderConfig&)>& keep) {
  std::vector<ProviderConfig> m;
  for (const ProviderConfig& c : provider_matrix()) {
    if (keep(c)) m.push_back(c);
  }
  return m;
}
// The paused-target tests need writes that wait for the target's CPU: every configuration but
// the IPC backend's, whose writes copy into the target's memory without it (PausedIpcTargetTest).
std::vector<ProviderConfig> needing_target_cpu() {
  return matrix_where([](const ProviderConfig& c) { return !c.writes_bypass_target_cpu(); });
}
std::vector<ProviderConfig> bypassing_target_cpu() {
  return matrix_where([](const ProviderConfig& c) { return c.writes_bypass_target_cpu(); });
}
// Groups of several domains on one medium (ipc: every path reaches the same peer process).
std::vector<ProviderConfig> one_medium_groups() {
  return matrix_where([](const ProviderConfig& c) { return c.provider == "ipc" && c.domains > 1; });
}

using PausedTargetTest = EngineTest;
using PausedIpcTargetTest = EngineTest;
using OneMediumFailureTest = EngineTest;

// A request still waiting at its deadline (the target is paused) completes with
// DeadlineExceeded; its late completion is absorbed once the target resumes, and the engine and
// peer keep working.
TEST_P(PausedTargetTest, DeadlineEndsARequestToAPausedPeer) {
  Outcomes out(1);  // before the engine, which may call it until stopped
  AgentProcess agent(GetParam(), 1 << 20);
  ASSERT_TRUE(agent.started());
  auto engine = make_engine();
  ASSERT_TRUE(engine);
  SourceBuffer src(*engine, 1 << 20, 91);
  StopEngineFirst stop_first(engine.get());
  Outcomes warm(1), after(1);
  // Connect first, so the pause hits a write, not the handshake.
  ASSERT_TRUE(engine->submit_write({src.reg.handle, 0, agent.desc(), 0, 4096}, warm.sink(0)).ok());
  ASSERT_TRUE(warm.all_ok());

  ASSERT_TRUE(agent.pause());
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(engine->submit_write({src.reg.handle, 0, agent.desc(), 0, 1 << 20, 92}, out.sink(0).with_timeout(300ms)).ok());
  // Ends by its deadline: at 300 ms, not before, and not much later (the worker's timer).
  ASSERT_TRUE(out.wait_all(2s));
  const auto took = out.completed_at(0) - t0;
  EXPECT_EQ(out.code(0), ErrorCode::kDeadlineExceeded);
  EXPECT_GE(took, 300ms);
  EXPECT_LT(took, 1s);
  ASSERT_TRUE(agent.resume());
  out.expect_exactly_once();  // the late completion, once the target runs again, is absorbed

  ASSERT_TRUE(engine->submit_write({src.reg.handle, 0, agent.desc(), 0, 1 << 20, 93}, after.sink(0)).ok());
  EXPECT_TRUE(after.all_ok());
  EXPECT_EQ(agent.expect_exactly(93, imm_count_of_write(1 << 20, RoundRobin{}, domains())), "ok");
  // The deadline-ended write's imms may have landed once it resumed: never more than it carries.
  const uint64_t late = agent.count(92);
  EXPECT_LE(late, imm_count_of_write(1 << 20, RoundRobin{}, domains()));
  EXPECT_EQ(agent.quiet(92, late), "ok");
  out.expect_exactly_once();
  EXPECT_EQ(engine->stats().deadlines_exceeded, 1u);
}

// The engine-wide default timeout applies to requests whose completion names no deadline.
TEST_P(PausedTargetTest, DefaultTimeoutApplies) {
  Outcomes out(1), warm(1);
  AgentProcess agent(GetParam(), 1 << 20);
  ASSERT_TRUE(agent.started());
  auto engine = GetParam().builder().default_timeout(200ms).build();
  ASSERT_TRUE(engine.ok());
  SourceBuffer src(**engine, 1 << 20, 94);
  StopEngineFirst stop_first(engine->get());
  ASSERT_TRUE((*engine)->submit_write({src.reg.handle, 0, agent.desc(), 0, 4096}, warm.sink(0)).ok());
  ASSERT_TRUE(warm.all_ok());
  ASSERT_TRUE(agent.pause());
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE((*engine)->submit_write({src.reg.handle, 0, agent.desc(), 0, 1 << 20}, out.sink(0)).ok());
  ASSERT_TRUE(out.wait_all(2s));
  EXPECT_EQ(out.code(0), ErrorCode::kDeadlineExceeded);
  EXPECT_GE(out.completed_at(0) - t0, 200ms);
  EXPECT_LT(out.completed_at(0) - t0, 1s);
  ASSERT_TRUE(agent.resume());
  out.expect_exactly_once();
}

// The IPC backend's writes copy into the target's memory without its CPU (as an RDMA NIC would),
// so a paused (SIGSTOP) target holds nothing up: writes into it complete Ok while it is stopped,
// their bytes are in its memory then (read here with process_vm_readv), and once it resumes it
// counts each of their imms exactly once. (So a deadline against a paused target, which the
// other configurations test, cannot happen here.)
TEST_P(PausedIpcTargetTest, WritesIntoAPausedTargetCompleteAndLand) {
  constexpr size_t kWrites = 64, kChunk = 256 * 1024;
  const size_t region = kWrites * kChunk;
  Outcomes warm(1), out(kWrites);  // before the engine, which may call them until stopped
  AgentProcess agent(GetParam(), region);
  ASSERT_TRUE(agent.started());
  auto engine = make_engine();
  ASSERT_TRUE(engine);
  SourceBuffer src(*engine, region, 90);
  StopEngineFirst stop_first(engine.get());
  ASSERT_TRUE(engine->submit_write({src.reg.handle, 0, agent.desc(), 0, 4096}, warm.sink(0)).ok());
  ASSERT_TRUE(warm.all_ok());
  ASSERT_EQ(agent.call("zero"), "ok");

  ASSERT_TRUE(agent.pause());
  uint64_t imms = 0;
  for (size_t i = 0; i < kWrites; ++i) {
    WriteRequest w{src.reg.handle, i * kChunk, agent.desc(), i * kChunk, kChunk, 89};
    imms += imm_count_of(w, domains());
    ASSERT_TRUE(engine->submit_write(w, out.sink(i)).ok());
  }
  EXPECT_TRUE(out.all_ok());
  EXPECT_TRUE(agent.stopped()) << "the target ran meanwhile";
  std::vector<uint8_t> landed(region);
  iovec local{landed.data(), region};
  iovec remote{reinterpret_cast<void*>(agent.desc().ptr()), region};
  ASSERT_EQ(process_vm_readv(agent.pid(), &local, 1, &remote, 1, 0), static_cast<ssize_t>(region)) << std::strerror(errno);
  EXPECT_EQ(hash_hex(landed.data(), region), hash_hex(src.bytes.data(), region)) << "bytes missing while paused";

  ASSERT_TRUE(agent.resume());
  EXPECT_EQ(agent.expect_exactly(89, imms), "ok");
  EXPECT_EQ(agent.hash(0, region), hash_hex(src.bytes.data(), region));
}

// A write the provider rejects (a forged key or a range past the real region) fails on the
// writer — at once, or through stall detection on providers that never answer — and leaves the
// target's bytes and counts untouched; a correct write afterwards lands. Each case has a target
// process of its own: shm and udp;ofi_rxd may wedge the connection to a peer after a rejected
// write (docs/failure-semantics.md, "Bad remote use"), and the second case must still run.
TEST_P(FailureTest, RemoteMisuseFailsOnWriterAndLeavesTargetIntact) {
  const size_t region = 1 << 20;
  std::vector<std::unique_ptr<Outcomes>> outcomes;  // outlive the engine's callbacks
  // Retry a failed peer at once: the correct write after the rejected one tries it afresh.
  auto engine = GetParam().builder().stall_timeout(1s).peer_retry_interval(0ms).build();
  ASSERT_TRUE(engine.ok());
  SourceBuffer src(**engine, region, 95);
  StopEngineFirst stop_first(engine->get());
  const bool tcp = GetParam().provider == "tcp";
  const bool ipc = GetParam().provider == "ipc";
  for (const std::string kind : {"bad key", "bad range"}) {
    SCOPED_TRACE(kind);
    AgentProcess agent(GetParam(), region);
    ASSERT_TRUE(agent.started());
    const MrDesc real = agent.desc();
    std::vector<MrDomainEntry> entries;
    for (size_t d = 0; d < real.num_domains(); ++d) {
      MrDomainEntry e = real.domain(d);
      if (kind == "bad key") e.rkey ^= 0x5a5a5a5a;
      entries.push_back(e);
    }
    const uint64_t forged_length = kind == "bad range" ? real.length() * 64 : real.length();
    const uint64_t offset = kind == "bad range" ? real.length() * 16 : 0;
    MrDesc forged = *MrDesc::create(real.transport(), real.memory_kind(), real.ptr(), forged_length, real.access(), entries);
    outcomes.push_back(std::make_unique<Outcomes>(2));
    Outcomes& out = *outcomes.back();
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE((*engine)->submit_write({src.reg.handle, 0, forged, offset, 4096, 96}, out.sink(0)).ok());
    // tcp refuses it at once (the target's provider answers with an error), the IPC backend too
    // (the writer checks the target's registration table); shm and udp;ofi_rxd never answer, and
    // stall detection (1 s) fails the path: the only one with 1 domain, one of 4 otherwise.
    ASSERT_TRUE(out.wait_for_request(0, bounds::kRequests)) << "the rejected write never completed";
    const ErrorCode refused = out.code(0);
    const auto took = out.completed_at(0) - t0;
    if (tcp) {
      EXPECT_EQ(refused, ErrorCode::kProviderError) << error_code_name(refused);
      EXPECT_LT(took, 1s) << "refused at once";
    } else if (ipc) {
      EXPECT_EQ(refused, kind == "bad key" ? ErrorCode::kInvalidArgument : ErrorCode::kOutOfRange) << error_code_name(refused);
      EXPECT_LT(took, 1s) << "refused at once";
    } else {
      EXPECT_EQ(refused, domains() == 1 ? ErrorCode::kPeerUnreachable : ErrorCode::kDomainDown) << error_code_name(refused);
      EXPECT_GE(took, 1s) << "only stall detection ends it";
    }
    EXPECT_EQ(agent.quiet(96, 0), "ok");
    EXPECT_EQ(agent.hash(0, region), hash_hex(std::vector<uint8_t>(region, 0).data(), region));
    // The engine and this target still work.
    ASSERT_TRUE((*engine)->submit_write({src.reg.handle, 0, real, 0, 4096, 97}, out.sink(1)).ok());
    ASSERT_TRUE(out.wait_all(bounds::kRequests));
    out.expect_exactly_once();
    if (out.code(1) == ErrorCode::kOk) {
      EXPECT_EQ(agent.expect_exactly(97, 1), "ok");
      EXPECT_EQ(agent.hash(0, 4096), hash_hex(src.bytes.data(), 4096));
    } else {
      // Documented provider limitation: shm and udp;ofi_rxd may wedge the connection to this peer.
      EXPECT_FALSE(tcp || ipc) << "tcp and ipc must recover: " << error_code_name(out.code(1));
      EXPECT_TRUE(out.code(1) == ErrorCode::kPeerUnreachable || out.code(1) == ErrorCode::kDomainDown)
          << error_code_name(out.code(1));
    }
  }
}

// kill -9 of the target during a stream of writes: every request completes exactly once (Ok
// before the kill, PeerUnreachable or DomainDown after), nothing hangs, the peer is reported
// unreachable, and a restarted target is usable without restarting the engine.
TEST_P(FailureTest, KilledTargetFailsPendingWritesOnceAndARestartedOneWorks) {
  constexpr size_t kRequests = 3000, kChunk = 64 * 1024;
  const size_t region = 8 << 20;
  Outcomes out(kRequests), refused(1), restarted(1);  // before the engines, which may call them until stopped
  auto agent = std::make_unique<AgentProcess>(GetParam(), region);
  ASSERT_TRUE(agent->started());
  std::mutex mu;
  std::vector<HealthEvent> events;
  auto engine = GetParam()
                    .builder()
                    .stall_timeout(1s)
                    .peer_retry_interval(50ms)
                    .on_health_event([&](const HealthEvent& e) {
                      std::lock_guard lock(mu);
                      events.push_back(e);
                    })
                    .build();
  ASSERT_TRUE(engine.ok());
  SourceBuffer src(**engine, region, 98);
  StopEngineFirst stop_first(engine->get());
  std::chrono::steady_clock::time_point killed_at;
  size_t done_before_kill = 0;
  for (size_t i = 0; i < kRequests; ++i) {
    const uint64_t off = (i * kChunk) % region;
    ASSERT_TRUE((*engine)->submit_write({src.reg.handle, off, agent->desc(), off, kChunk, 99}, out.sink(i)).ok());
    if (i == kRequests / 3) {
      // Mid-stream: some writes have completed (Ok), many are in flight.
      ASSERT_TRUE(out.wait_until(100, bounds::kRequests));
      // The count first, then the time: a request that completes between the two reads then has
      // a time after killed_at and is not in the count (the other order failed once on 16 cores:
      // 100 Ok before the time, 101 counted).
      done_before_kill = out.finished.load();
      killed_at = std::chrono::steady_clock::now();
      agent->kill_now();
    }
  }
  // Stall detection (1 s) ends what the dead target never answers.
  ASSERT_TRUE(out.wait_all(bounds::kRequests)) << out.finished.load() << " of " << kRequests;
  out.expect_exactly_once();
  // Ok before the kill (at least the 100 waited for), failures only after it.
  size_t ok_before = 0;
  for (size_t i = 0; i < kRequests; ++i) {
    if (out.completed_at(i) <= killed_at) {
      EXPECT_EQ(out.code(i), ErrorCode::kOk) << "request " << i << " failed before the kill";
      ok_before += out.code(i) == ErrorCode::kOk;
    }
  }
  EXPECT_GE(ok_before, done_before_kill);
  EXPECT_GE(ok_before, 100u);
  expect_reordering_as_configured(**engine);
  // shm (libfabric 1.17) may instead get stuck for good inside fi_writedata, spinning on a lock the
  // killed process held in its shared memory; the watchdog then gives the group up and its
  // requests fail with ProviderError (docs/failure-semantics.md).
  const bool given_up = (*engine)->stats().groups_abandoned > 0;
  EXPECT_EQ(out.count(ErrorCode::kOk) + out.count(ErrorCode::kPeerUnreachable) + out.count(ErrorCode::kDomainDown) +
                out.count(ErrorCode::kProviderError),
            kRequests);
  if (given_up) {
    EXPECT_EQ(GetParam().provider, "shm") << "only shm is known to get stuck inside the provider";
    EXPECT_GT(out.count(ErrorCode::kProviderError), 0u);
  } else {
    EXPECT_EQ(out.count(ErrorCode::kProviderError), 0u);
    EXPECT_GT(out.count(ErrorCode::kPeerUnreachable), 0u);
  }
  auto status = (*engine)->peer_status();
  if (given_up) {
    EXPECT_TRUE(status.empty());  // a given-up group answers nothing
  } else {
    ASSERT_EQ(status.size(), 1u);
    EXPECT_EQ(status[0].health, PeerHealth::kUnreachable);
    EXPECT_EQ(status[0].inflight, 0u);
  }
  {
    std::lock_guard lock(mu);
    bool peer_down = false;
    for (const auto& e : events) peer_down |= e.domain == -1 && !e.up;
    EXPECT_TRUE(peer_down || given_up) << "no health event for the dead peer";
  }
  // A restarted target (a new process, a new address) works with the same engine — except on
  // shm, whose endpoint keeps a dead peer's operations forever in libfabric 1.17 and refuses new
  // ones (docs/failure-semantics.md): there a request fails cleanly and a new engine is needed.
  agent = std::make_unique<AgentProcess>(GetParam(), region);
  ASSERT_TRUE(agent->started());
  const bool shm = GetParam().provider == "shm";
  std::unique_ptr<TransferEngine> fresh;
  TransferEngine* writer = engine->get();
  if (shm) {
    ASSERT_TRUE((*engine)->submit_write({src.reg.handle, 0, agent->desc(), 0, 4096}, refused.sink(0)).ok());
    ASSERT_TRUE(refused.wait_all(bounds::kRequests));  // stall detection (1 s) or the given-up group
    refused.expect_exactly_once();
    const ErrorCode c = refused.code(0);
    EXPECT_TRUE(c == ErrorCode::kOk || c == ErrorCode::kPeerUnreachable || c == ErrorCode::kDomainDown ||
                (given_up && c == ErrorCode::kProviderError))
        << error_code_name(c);
    fresh = std::move(GetParam().builder().build()).value();
    writer = fresh.get();
  }
  SourceBuffer fresh_src(*writer, region, 98);
  StopEngineFirst stop_fresh(fresh.get());
  ASSERT_TRUE(writer->submit_write({fresh_src.reg.handle, 0, agent->desc(), 0, region, 100}, restarted.sink(0)).ok());
  EXPECT_TRUE(restarted.all_ok());
  EXPECT_EQ(agent->hash(0, region), hash_hex(src.bytes.data(), region));
  EXPECT_EQ(agent->expect_exactly(100, imm_count_of_write(region, RoundRobin{}, domains())), "ok");
}

// On one medium (ipc with several domains: every path reaches the same process) one failed WR
// takes the whole peer down: after the target is killed, default-routed writes (all on domain 0)
// leave the peer Unreachable with every path down and all fail as PeerUnreachable — not Degraded
// with paths 1..N-1 still "up" (what a later retry of the peer found in the killed-target test
// above, under TSan load). WRs still in flight on domain 0 when the first failure is seen go
// down with the peer (PeerUnreachable, not DomainDown) when there are some: timing decides that
// here; the killed-target test above has thousands in flight and fails without it.
TEST_P(OneMediumFailureTest, OneFailedWriteTakesThePeerDown) {
  const size_t region = 1 << 20;
  constexpr size_t kWrites = 17;
  Outcomes out(kWrites);
  AgentProcess agent(GetParam(), region);
  ASSERT_TRUE(agent.started());
  auto engine = GetParam().builder().stall_timeout(1s).peer_retry_interval(3600s).build();
  ASSERT_TRUE(engine.ok());
  SourceBuffer src(**engine, region, 90);
  StopEngineFirst stop_first(engine->get());
  ASSERT_TRUE((*engine)->submit_write({src.reg.handle, 0, agent.desc(), 0, 4096, 91}, out.sink(0)).ok());
  ASSERT_TRUE(out.wait_until(1, bounds::kRequests));
  ASSERT_EQ(out.code(0), ErrorCode::kOk);
  agent.kill_now();
  for (size_t i = 1; i < kWrites; ++i) {
    ASSERT_TRUE((*engine)->submit_write({src.reg.handle, 0, agent.desc(), 0, 64 * 1024, 92}, out.sink(i)).ok());
  }
  ASSERT_TRUE(out.wait_all(bounds::kRequests));
  out.expect_exactly_once();
  EXPECT_EQ(out.count(ErrorCode::kPeerUnreachable), kWrites - 1);
  const std::vector<PeerStatus> status = (*engine)->peer_status();
  ASSERT_EQ(status.size(), 1u);
  EXPECT_EQ(status[0].health, PeerHealth::kUnreachable);
  ASSERT_EQ(status[0].paths_up.size(), GetParam().domains);
  for (size_t d = 0; d < status[0].paths_up.size(); ++d) EXPECT_FALSE(status[0].paths_up[d]) << "path " << d;
  EXPECT_EQ(status[0].inflight, 0u);
}

// stop() on both sides while each is writing thousands of requests to the other: every request
// on both sides completes exactly once and neither side hangs.
TEST_P(FailureTest, StopOnBothSidesWithWorkInFlight) {
  constexpr size_t kRequests = 3000, kChunk = 16 * 1024;
  const size_t region = 4 << 20;
  Outcomes out(kRequests);
  AgentProcess agent(GetParam(), region);
  ASSERT_TRUE(agent.started());
  auto engine = GetParam().builder().stall_timeout(1s).build();
  ASSERT_TRUE(engine.ok());
  SourceBuffer target(**engine, region, 101, Access::kRemoteWrite);
  StopEngineFirst stop_first(engine->get());
  ASSERT_EQ(agent.call("write_burst " + target.reg.desc.to_hex() + " " + std::to_string(kRequests) + " " +
                       std::to_string(kChunk) + " 102"),
            "ok");
  for (size_t i = 0; i < kRequests; ++i) {
    const uint64_t off = (i * kChunk) % region;
    ASSERT_TRUE((*engine)->submit_write({target.reg.handle, off, agent.desc(), off, kChunk, 103}, out.sink(i)).ok());
  }
  std::thread their_stop([&] { EXPECT_EQ(agent.call("stop"), "ok"); });
  ASSERT_TRUE((*engine)->stop().ok());
  their_stop.join();
  EXPECT_EQ(out.finished.load(), kRequests);  // stop() returns after every callback ran
  out.expect_exactly_once();
  // Ok, Cancelled by our stop(), or failed because the peer went away with its stop().
  for (const auto& [c, n] : out.codes()) {
    EXPECT_TRUE(c == ErrorCode::kOk || c == ErrorCode::kCancelled || c == ErrorCode::kPeerUnreachable ||
                c == ErrorCode::kDomainDown)
        << n << " requests ended with " << error_code_name(c);
  }
  auto words = tools::split_words(agent.call("burst_status"));
  ASSERT_GE(words.size(), 2u);
  EXPECT_EQ(words[0], std::to_string(kRequests)) << "the agent's requests did not all complete";
  EXPECT_EQ(words[1], "1") << "an agent request completed twice";
  for (size_t k = 2; k < words.size(); ++k) {
    const std::string code = words[k].substr(0, words[k].find('='));
    EXPECT_TRUE(code == "ok" || code == "cancelled" || code == "peer_unreachable" || code == "domain_down") << words[k];
  }
}

INSTANTIATE_TEST_SUITE_P(Matrix, FailureTest, ::testing::ValuesIn(provider_matrix()), matrix_name);
INSTANTIATE_TEST_SUITE_P(Matrix, PausedTargetTest, ::testing::ValuesIn(needing_target_cpu()), matrix_name);
INSTANTIATE_TEST_SUITE_P(Matrix, PausedIpcTargetTest, ::testing::ValuesIn(bypassing_target_cpu()), matrix_name);
INSTANTIATE_TEST_SUITE_P(Matrix, OneMediumFailureTest, ::testing::ValuesIn(one_medium_groups()), matrix_name);

}  // namespace
}  // namespace fabric_lib::testing

namespace fabric_lib::testing {
namespace {

using ProbeTest = EngineTest;

// With the liveness probe (stall detection off), a paused peer's paths fail after `misses`
// unanswered pings, its pending request fails with PeerUnreachable, and once it resumes the probe
// brings its paths back up: a new request succeeds without any retry interval.
TEST_P(ProbeTest, ProbeDetectsAPausedPeerAndItsRecovery) {
  std::mutex mu;
  std::vector<HealthEvent> events;
  Outcomes warm(1), pending(1), after(1);  // before the engine, which may call them until stopped
  AgentProcess agent(GetParam(), 1 << 20);
  ASSERT_TRUE(agent.started());
  auto engine = GetParam()
                    .builder()
                    .stall_timeout(std::chrono::nanoseconds(0))
                    .peer_retry_interval(std::chrono::hours(1))  // only the probe may bring it back
                    .liveness_probe(100ms, 5)
                    .on_health_event([&](const HealthEvent& e) {
                      std::lock_guard lock(mu);
                      events.push_back(e);
                    })
                    .build();
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  SourceBuffer src(**engine, 1 << 20, 141);
  StopEngineFirst stop_first(engine->get());
  ASSERT_TRUE((*engine)->submit_write({src.reg.handle, 0, agent.desc(), 0, 4096}, warm.sink(0)).ok());
  ASSERT_TRUE(warm.all_ok());
  ASSERT_TRUE(agent.pause());
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE((*engine)->submit_write({src.reg.handle, 0, agent.desc(), 0, 1 << 20}, pending.sink(0)).ok());
  // 5 unanswered pings 100 ms apart: about 0.5 s (1 s allowed for the load of the machine).
  ASSERT_TRUE(pending.wait_all(2s));
  EXPECT_TRUE(pending.code(0) == ErrorCode::kPeerUnreachable || pending.code(0) == ErrorCode::kDomainDown)
      << error_code_name(pending.code(0));
  EXPECT_GE(pending.completed_at(0) - t0, 400ms) << "failed before 5 pings went unanswered";
  EXPECT_LT(pending.completed_at(0) - t0, 1500ms);
  // The request may end as soon as its first path fails; every path follows within a few pings.
  EXPECT_TRUE(eventually([&] { return (*engine)->peer_status().at(0).health == PeerHealth::kUnreachable; }, 2s))
      << "the paused peer was never found unreachable";
  ASSERT_TRUE(agent.resume());
  // Recovery pings are answered: every path comes back up.
  EXPECT_TRUE(eventually([&] { return (*engine)->peer_status().at(0).health == PeerHealth::kHealthy; }, 2s))
      << "the resumed peer never came back";
  ASSERT_TRUE((*engine)->submit_write({src.reg.handle, 0, agent.desc(), 0, 1 << 20, 142}, after.sink(0)).ok());
  EXPECT_TRUE(after.all_ok());
  EXPECT_EQ(agent.expect_exactly(142, imm_count_of_write(1 << 20, RoundRobin{}, domains())), "ok");
  pending.expect_exactly_once();
  std::lock_guard lock(mu);
  bool down = false, up = false;
  for (const auto& e : events) {
    down |= !e.up && e.domain >= 0;
    up |= e.up && e.domain >= 0;
  }
  EXPECT_TRUE(down && up) << "missing path down/up events";
}

INSTANTIATE_TEST_SUITE_P(Matrix, ProbeTest, ::testing::ValuesIn(needing_target_cpu()), matrix_name);

}  // namespace
}  // namespace fabric_lib::testing

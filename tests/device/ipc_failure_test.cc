// Failures over ipc on GPU memory: stop() with thousands of writes in flight (each completes
// once, Ok or Cancelled), kill -9 of the target mid-stream (PeerUnreachable, the peer reported
// unreachable, a restarted target usable by the same engine), stop() on both sides while each
// writes into the other's GPU memory, and forged keys and ranges failing on the writer with the
// target's bytes and counts untouched.
#include <map>
#include <mutex>
#include <thread>

#include "ipc_support.h"
#include "support/outcomes.h"

namespace fabric_lib::device_tests {
namespace {

using namespace std::chrono_literals;
using testing::AgentProcess;
using testing::Outcomes;

using IpcGpuFailureTest = IpcGpuTest;

TEST_P(IpcGpuFailureTest, StopWithWorkInFlightCancelsEachOnce) {
  constexpr size_t kRequests = 4000, kChunk = 64 * 1024;
  const size_t region = 4 << 20;
  Outcomes out(kRequests);
  AgentProcess agent(config(), region);
  ASSERT_TRUE(agent.started());
  auto engine = make_engine();
  ASSERT_TRUE(engine);
  GpuSource src(*engine, region, 52);
  for (size_t i = 0; i < kRequests; ++i) {
    const uint64_t off = (i * kChunk) % region;
    ASSERT_TRUE(engine->submit_write({src.reg.handle, off, agent.desc(), off, kChunk, 62}, out.sink(i)).ok());
  }
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(engine->stop().ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 30s);
  out.expect_exactly_once();
  EXPECT_EQ(out.count(ErrorCode::kOk) + out.count(ErrorCode::kCancelled), kRequests);
  EXPECT_GT(out.count(ErrorCode::kCancelled), 0u) << "stop() came too late to cancel anything";
  EXPECT_EQ(engine->submit_imm(1, agent.desc(), Completion()).status().code(), ErrorCode::kStopped);
  // The target still works and counted no more imms than writes completed.
  EXPECT_LE(agent.count(62), kRequests);
}

TEST_P(IpcGpuFailureTest, KilledTargetFailsPendingWritesOnceAndARestartedOneWorks) {
  constexpr size_t kRequests = 3000, kChunk = 64 * 1024;
  const size_t region = 8 << 20;
  Outcomes out(kRequests);
  auto agent = std::make_unique<AgentProcess>(config(), region);
  ASSERT_TRUE(agent->started());
  std::mutex mu;
  std::vector<HealthEvent> events;
  auto engine = make_engine(config().builder().stall_timeout(500ms).peer_retry_interval(50ms).on_health_event(
      [&](const HealthEvent& e) {
        std::lock_guard lock(mu);
        events.push_back(e);
      }));
  ASSERT_TRUE(engine);
  GpuSource src(*engine, region, 98);
  for (size_t i = 0; i < kRequests; ++i) {
    const uint64_t off = (i * kChunk) % region;
    ASSERT_TRUE(engine->submit_write({src.reg.handle, off, agent->desc(), off, kChunk, 99}, out.sink(i)).ok());
    if (i == kRequests / 3) agent->kill_now();
  }
  ASSERT_TRUE(out.wait_all(60s)) << out.finished.load() << " of " << kRequests;
  out.expect_exactly_once();
  EXPECT_EQ(out.count(ErrorCode::kOk) + out.count(ErrorCode::kPeerUnreachable) + out.count(ErrorCode::kDomainDown),
            kRequests);
  EXPECT_GT(out.count(ErrorCode::kPeerUnreachable), 0u);
  PeerHealth health = PeerHealth::kHealthy;
  for (int i = 0; i < 200 && health != PeerHealth::kUnreachable; ++i) {
    health = engine->peer_status().at(0).health;
    if (health != PeerHealth::kUnreachable) std::this_thread::sleep_for(25ms);
  }
  EXPECT_EQ(health, PeerHealth::kUnreachable);
  {
    std::lock_guard lock(mu);
    bool peer_down = false;
    for (const auto& e : events) peer_down |= e.domain == -1 && !e.up;
    EXPECT_TRUE(peer_down) << "no health event for the dead peer";
  }
  // A restarted target: a new process, a new address, the same engine.
  agent = std::make_unique<AgentProcess>(config(), region);
  ASSERT_TRUE(agent->started());
  CompletionCounter done;
  ASSERT_TRUE(engine->submit_write({src.reg.handle, 0, agent->desc(), 0, region, 100}, Completion::counter(done)).ok());
  testing::wait_all_of(done, 1);
  EXPECT_EQ(done.errors, 0u);
  EXPECT_TRUE(agent->expect_imms(100, imm_count_of_write(region, RoundRobin{}, domains())));
  EXPECT_EQ(agent->hash(0, region), testing::hash_hex(src.host.data(), region));
}

TEST_P(IpcGpuFailureTest, StopOnBothSidesWithWorkInFlight) {
  constexpr size_t kRequests = 3000, kChunk = 16 * 1024;
  const size_t region = 4 << 20;
  Outcomes out(kRequests);
  AgentProcess agent(config(), region);
  ASSERT_TRUE(agent.started());
  auto engine = make_engine();
  ASSERT_TRUE(engine);
  DeviceBuffer target(region);  // our GPU memory, which the agent writes into
  ASSERT_NE(target.ptr, nullptr);
  auto target_mr = engine->register_memory(target.ptr, region, Access::kRemoteWrite, MemoryKind::kCuda);
  ASSERT_TRUE(target_mr.ok()) << target_mr.status().to_string();
  GpuSource src(*engine, region, 101);
  ASSERT_EQ(agent.call("write_burst " + target_mr->desc.to_hex() + " " + std::to_string(kRequests) + " " +
                       std::to_string(kChunk) + " 102"),
            "ok");
  for (size_t i = 0; i < kRequests; ++i) {
    const uint64_t off = (i * kChunk) % region;
    ASSERT_TRUE(engine->submit_write({src.reg.handle, off, agent.desc(), off, kChunk, 103}, out.sink(i)).ok());
  }
  std::thread their_stop([&] { EXPECT_EQ(agent.call("stop"), "ok"); });
  ASSERT_TRUE(engine->stop().ok());
  their_stop.join();
  out.expect_exactly_once();
  EXPECT_EQ(out.finished.load(), kRequests);
  auto words = tools::split_words(agent.call("burst_status"));
  ASSERT_GE(words.size(), 2u);
  EXPECT_EQ(words[0], std::to_string(kRequests)) << "the agent's requests did not all complete";
  EXPECT_EQ(words[1], "1") << "an agent request completed twice";
}

TEST_P(IpcGpuFailureTest, ForgedKeysAndRangesFailOnTheWriterAndLeaveTheTargetIntact) {
  const size_t region = 1 << 20;
  AgentProcess agent(config(), region);
  ASSERT_TRUE(agent.started());
  auto engine = make_engine();
  ASSERT_TRUE(engine);
  GpuSource src(*engine, region, 95);
  const MrDesc real = agent.desc();
  const std::string zero_hash = testing::hash_hex(std::vector<uint8_t>(region, 0).data(), region);
  for (const bool bad_key : {true, false}) {
    std::vector<MrDomainEntry> entries;
    for (size_t d = 0; d < real.num_domains(); ++d) {
      MrDomainEntry e = real.domain(d);
      if (bad_key) e.rkey ^= 0x5a5a5a5a;
      entries.push_back(e);
    }
    MrDesc forged = *MrDesc::create(real.transport(), real.memory_kind(), real.ptr(), bad_key ? real.length() : real.length() * 64,
                                    real.access(), entries);
    CompletionCounter done;
    ASSERT_TRUE(engine->submit_write({src.reg.handle, 0, forged, bad_key ? 0 : real.length() * 16, 4096, 96},
                                     Completion::counter(done))
                    .ok());
    testing::wait_all_of(done, 1, std::chrono::seconds(20));
    EXPECT_EQ(done.errors, 1u) << (bad_key ? "bad key" : "bad range");
    EXPECT_EQ(agent.hash(0, region), zero_hash);
    EXPECT_EQ(agent.count(96), 0u);
  }
  CompletionCounter good;
  ASSERT_TRUE(engine->submit_write({src.reg.handle, 0, real, 0, 4096, 97}, Completion::counter(good)).ok());
  testing::wait_all_of(good, 1);
  EXPECT_EQ(good.errors, 0u);
  EXPECT_TRUE(agent.expect_imms(97, 1));
}

INSTANTIATE_TEST_SUITE_P(Ipc, IpcGpuFailureTest, ::testing::Values(size_t{1}, size_t{4}),
                         [](const auto& info) { return "ipc_" + std::to_string(info.param) + "dom"; });

}  // namespace
}  // namespace fabric_lib::device_tests

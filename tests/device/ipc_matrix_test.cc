// The core integration matrix on GPU memory over ipc, between this process (GPU 0) and agent
// processes whose regions are GPU memory on peer_gpu() (GPU 1 with two GPUs, else GPU 0 shared):
// single writes of edge sizes from GPU, pinned and pageable host sources; paged writes with
// permuted pages in every copy mode; imm-only; an expectation registered after the arrivals; a
// kernel in the target that sees the bytes once its imm flag is set; scatter and barrier to
// three peers; messages both ways; thousands of requests in flight. Bytes are verified by hash
// against a host shadow, imm counts against imm_count_of. 1 and 4 domains per group.
#include <cstdlib>
#include <numeric>
#include <random>
#include <thread>

#include "common/pattern.h"
#include "ipc_agent.h"
#include "ipc_support.h"

namespace fabric_lib::device_tests {
namespace {

using testing::AgentProcess;
constexpr size_t kMiB = 1 << 20;

TEST_P(IpcGpuTest, SingleWritesOfEdgeSizesLandExactly) {
  const size_t region = 66 * kMiB;
  AgentProcess agent(config(), region);
  ASSERT_TRUE(agent.started());
  auto engine = make_engine();
  ASSERT_TRUE(engine);
  GpuSource src(*engine, region, 11);
  ASSERT_TRUE(src.ok());
  Shadow shadow(region);
  struct Case {
    uint64_t src_off, dst_off, len;
  };
  const std::vector<Case> cases = {{0, 0, 1},          {7, 100, 4097},        {4096, 8192, 64 * 1024 + 3},
                                   {3, kMiB + 1, kMiB + 5}, {0, 2 * kMiB, 64 * kMiB}};
  CompletionCounter done;
  uint32_t imm = 100;
  for (const Case& c : cases) {
    WriteRequest w{src.reg.handle, c.src_off, agent.desc(), c.dst_off, c.len, imm};
    ASSERT_TRUE(engine->submit_write(w, Completion::counter(done)).ok());
    shadow.write(src.host.data() + c.src_off, c.dst_off, c.len);
    EXPECT_TRUE(agent.expect_imms(imm, imm_count_of(w, domains()))) << "size " << c.len;
    ++imm;
  }
  testing::wait_all_of(done, cases.size());
  EXPECT_EQ(done.errors, 0u);
  EXPECT_EQ(agent.hash(0, region), shadow.hash());
  for (uint32_t i = 100; i < imm; ++i) EXPECT_EQ(agent.count(i), 0u);
}

// Host memory as the source of writes into GPU memory: pinned (cudaHostAlloc) and pageable.
TEST_P(IpcGpuTest, HostSourcesReachGpuTargets) {
  const size_t bytes = 4 * kMiB;
  AgentProcess agent(config(), bytes);
  ASSERT_TRUE(agent.started());
  auto engine = make_engine();
  ASSERT_TRUE(engine);
  void* pinned = nullptr;
  FL_CUDA_ASSERT(cudaHostAlloc(&pinned, bytes, cudaHostAllocPortable));
  std::vector<uint8_t> pageable(bytes);
  tools::fill_pattern(static_cast<uint8_t*>(pinned), bytes, 21);
  tools::fill_pattern(pageable.data(), bytes, 22);
  auto pinned_mr = engine->register_memory(pinned, bytes, Access::kLocalOnly);
  auto pageable_mr = engine->register_memory(pageable.data(), bytes, Access::kLocalOnly);
  ASSERT_TRUE(pinned_mr.ok() && pageable_mr.ok());
  Shadow shadow(bytes);
  CompletionCounter done;
  const uint64_t half = bytes / 2;
  ASSERT_TRUE(engine->submit_write({pinned_mr->handle, 5, agent.desc(), 0, half - 3, 31}, Completion::counter(done)).ok());
  ASSERT_TRUE(engine->submit_write({pageable_mr->handle, 0, agent.desc(), half, half, 32}, Completion::counter(done)).ok());
  shadow.write(static_cast<uint8_t*>(pinned) + 5, 0, half - 3);
  shadow.write(pageable.data(), half, half);
  testing::wait_all_of(done, 2);
  EXPECT_EQ(done.errors, 0u);
  EXPECT_TRUE(agent.expect_imms(31, imm_count_of_write(half - 3, RoundRobin{}, domains())));
  EXPECT_TRUE(agent.expect_imms(32, imm_count_of_write(half, RoundRobin{}, domains())));
  EXPECT_EQ(agent.hash(0, bytes), shadow.hash());
  engine->stop();
  cudaFreeHost(pinned);
}

// Every copy mode of the GPU backend (FABRIC_LIB_NVLINK_COPY), with 4 KiB, odd 1000-byte (no
// 16-byte alignment: the kernel's byte path) and 64 KiB pages, permuted and non-contiguous.
TEST_P(IpcGpuTest, PagedWritesWithPermutedPagesInEveryCopyMode) {
  const size_t pages = 512;
  const uint64_t largest = 65536, src_off = 64, dst_off = 32;
  const size_t region = dst_off + (pages * 2) * (largest + 96) + largest;
  AgentProcess agent(config(), region);
  ASSERT_TRUE(agent.started());
  std::mt19937 rng(7);
  for (const char* mode : {"auto", "memcpy", "batch", "kernel"}) {
    CopyModeScope scope(mode);  // read when the new engine's domains first meet GPU memory
    auto engine = make_engine();
    ASSERT_TRUE(engine);
    GpuSource src(*engine, src_off + pages * (largest + 512) + largest, 13);
    ASSERT_TRUE(src.ok());
    for (uint64_t page : {uint64_t{4096}, uint64_t{1000}, largest}) {
      SCOPED_TRACE(std::string(mode) + ", page " + std::to_string(page));
      const uint64_t src_stride = page + 512, dst_stride = page + 96;
      ASSERT_EQ(agent.call("zero"), "ok");
      Shadow shadow(region);
      PagedWriteRequest p;
      p.src = src.reg.handle;
      p.dst = agent.desc();
      p.page_length = page;
      p.src_stride = src_stride;
      p.dst_stride = dst_stride;
      p.src_offset = src_off;
      p.dst_offset = dst_off;
      p.imm = 9;
      p.src_pages.resize(pages);
      std::iota(p.src_pages.begin(), p.src_pages.end(), 0);
      std::shuffle(p.src_pages.begin(), p.src_pages.end(), rng);
      std::vector<uint32_t> slots(pages * 2);
      std::iota(slots.begin(), slots.end(), 0);
      std::shuffle(slots.begin(), slots.end(), rng);
      p.dst_pages.assign(slots.begin(), slots.begin() + pages);
      for (size_t i = 0; i < pages; ++i) {
        shadow.write(src.host.data() + src_off + p.src_pages[i] * src_stride, dst_off + p.dst_pages[i] * dst_stride, page);
      }
      CompletionCounter done;
      ASSERT_TRUE(engine->submit_paged_writes(p, Completion::counter(done)).ok());
      EXPECT_TRUE(agent.expect_imms(9, imm_count_of(p, domains())));
      testing::wait_all_of(done, 1);
      EXPECT_EQ(done.errors, 0u);
      EXPECT_EQ(agent.hash(0, region), shadow.hash());
      EXPECT_EQ(agent.count(9), 0u);
    }
  }
}

TEST_P(IpcGpuTest, WriteWithoutImmThenImmOnly) {
  AgentProcess agent(config(), kMiB);
  ASSERT_TRUE(agent.started());
  auto engine = make_engine();
  ASSERT_TRUE(engine);
  GpuSource src(*engine, kMiB, 12);
  Shadow shadow(kMiB);
  CompletionCounter done;
  ASSERT_TRUE(engine->submit_write({src.reg.handle, 0, agent.desc(), 512, 300000}, Completion::counter(done)).ok());
  shadow.write(src.host.data(), 512, 300000);
  testing::wait_all_of(done, 1);
  // Delivery-complete: the bytes are at the target once the write completed.
  EXPECT_EQ(agent.hash(0, kMiB), shadow.hash());
  ASSERT_TRUE(engine->submit_imm(55, agent.desc(), Completion::counter(done)).ok());
  testing::wait_all_of(done, 2);
  EXPECT_EQ(done.errors, 0u);
  EXPECT_TRUE(agent.expect_imms(55, kImmCountOfImmOnly));
}

TEST_P(IpcGpuTest, ExpectationAfterArrivalStillFires) {
  AgentProcess agent(config(), 4096);
  ASSERT_TRUE(agent.started());
  auto engine = make_engine();
  ASSERT_TRUE(engine);
  CompletionCounter done;
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(engine->submit_imm(77, agent.desc(), Completion::counter(done)).ok());
  testing::wait_all_of(done, 10);
  uint64_t seen = 0;
  for (int i = 0; i < 6000 && seen < 10; ++i) {
    seen = agent.count(77);
    if (seen < 10) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(seen, 10u);
  EXPECT_TRUE(agent.expect_imms(77, 6, std::chrono::milliseconds(100)));
  EXPECT_EQ(agent.count(77), 4u);
  EXPECT_TRUE(agent.expect_imms(77, 4, std::chrono::milliseconds(100)));
  EXPECT_EQ(agent.count(77), 0u);
}

// Data before imm, seen from the GPU: a kernel in the target waits for the flag its expectation
// sets, then reads every byte the writes delivered.
TEST_P(IpcGpuTest, TargetKernelSeesTheBytesWhenItsImmFlagIsSet) {
  constexpr uint64_t kBytes = 16 * kMiB, kChunk = 256 * 1024, kSeed = 1234;
  AgentProcess agent(config(), kBytes);
  ASSERT_TRUE(agent.started());
  auto engine = make_engine();
  ASSERT_TRUE(engine);
  GpuSource src(*engine, kBytes, kSeed);
  const uint64_t writes = kBytes / kChunk;
  const uint64_t expected = writes * imm_count_of_write(kChunk, RoundRobin{}, domains());
  ASSERT_EQ(agent.call("flag_check 4242 " + std::to_string(expected) + " " + std::to_string(kSeed) + " " +
                       std::to_string(kBytes)),
            "ok");
  CompletionCounter done;
  for (uint64_t i = 0; i < writes; ++i) {
    ASSERT_TRUE(engine->submit_write({src.reg.handle, i * kChunk, agent.desc(), i * kChunk, kChunk, 4242},
                                     Completion::counter(done))
                    .ok());
  }
  testing::wait_all_of(done, writes);
  EXPECT_EQ(done.errors, 0u);
  EXPECT_EQ(agent.call("flag_result"), "0 0 18446744073709551615") << "outcome (0 = flag set), mismatches, first";
}

TEST_P(IpcGpuTest, ScatterAndBarrierToThreeGpuPeers) {
  constexpr size_t kPeers = 3, kRegion = kMiB;
  std::vector<std::unique_ptr<AgentProcess>> agents;
  std::vector<MrDesc> descs;
  for (size_t i = 0; i < kPeers; ++i) {
    agents.push_back(std::make_unique<AgentProcess>(config(), kRegion));
    ASSERT_TRUE(agents.back()->started());
    descs.push_back(agents.back()->desc());
  }
  auto engine = make_engine();
  ASSERT_TRUE(engine);
  GpuSource src(*engine, kRegion, 21);
  auto group = engine->add_peer_group(descs);
  ASSERT_TRUE(group.ok()) << group.status().to_string();
  uint32_t imm = 31;
  for (ScatterSharding sharding : {ScatterSharding::kByPeer, ScatterSharding::kByBytes}) {
    for (bool use_group : {false, true}) {
      for (size_t p = 0; p < kPeers; ++p) ASSERT_EQ(agents[p]->call("zero"), "ok");
      std::vector<Shadow> shadows(kPeers, Shadow(kRegion));
      ScatterRequest req;
      req.src = src.reg.handle;
      req.imm = imm;
      req.sharding = sharding;
      if (use_group) req.group = &*group;
      const std::vector<std::pair<size_t, ScatterTarget>> layout = {
          {0, {4096, 0, 100}}, {1, {300000, 5000, 0}}, {2, {1, 777, 9}}, {1, {70000, 400000, 600000}}};
      for (const auto& [peer, target] : layout) {
        ScatterTarget t = target;
        if (use_group) t.peer = static_cast<uint32_t>(peer);
        else t.dst = descs[peer];
        req.targets.push_back(t);
        shadows[peer].write(src.host.data() + t.src_offset, t.dst_offset, t.length);
      }
      std::vector<uint64_t> expected(kPeers, 0);
      for (size_t i = 0; i < layout.size(); ++i) expected[layout[i].first] += imm_count_of(req, i, domains());
      CompletionCounter done;
      ASSERT_TRUE(engine->submit_scatter(req, Completion::counter(done)).ok());
      for (size_t p = 0; p < kPeers; ++p) EXPECT_TRUE(agents[p]->expect_imms(imm, expected[p])) << "peer " << p;
      testing::wait_all_of(done, 1);
      EXPECT_EQ(done.errors, 0u);
      for (size_t p = 0; p < kPeers; ++p) EXPECT_EQ(agents[p]->hash(0, kRegion), shadows[p].hash()) << "peer " << p;
      ++imm;
    }
  }
  CompletionCounter barrier;
  ASSERT_TRUE(engine->submit_barrier(41, descs, Completion::counter(barrier)).ok());
  for (size_t p = 0; p < kPeers; ++p) EXPECT_TRUE(agents[p]->expect_imms(41, kImmCountOfBarrierPerPeer));
  testing::wait_all_of(barrier, 1);
  EXPECT_EQ(barrier.errors, 0u);
  for (size_t p = 0; p < kPeers; ++p) EXPECT_EQ(agents[p]->count(41), 0u);
}

TEST_P(IpcGpuTest, MessagesBothWays) {
  AgentProcess agent(config(), 4096);
  ASSERT_TRUE(agent.started());
  auto engine = make_engine();
  ASSERT_TRUE(engine);
  std::mutex mu;
  std::vector<std::string> got;
  ASSERT_TRUE(engine->post_recvs(8, 64 * 1024, [&](std::span<const uint8_t> m) {
                      std::lock_guard lock(mu);
                      got.push_back(testing::hash_hex(m.data(), m.size()) + ":" + std::to_string(m.size()));
                    }).ok());
  ASSERT_EQ(agent.call("recvs 8 65536"), "ok");
  std::string expected_there = "ok";
  CompletionCounter sent;
  for (size_t len : {size_t{0}, size_t{1}, size_t{216}, size_t{217}, size_t{65536}}) {
    std::vector<uint8_t> m(len);
    tools::fill_pattern(m.data(), len, 70 + len);
    ASSERT_TRUE(engine->submit_send(agent.address(), m, Completion::counter(sent)).ok());
    expected_there += " " + testing::hash_hex(m.data(), len) + ":" + std::to_string(len);
  }
  testing::wait_all_of(sent, 5);
  EXPECT_EQ(sent.errors, 0u);
  EXPECT_EQ(agent.call("messages 5 10000"), expected_there);
  ASSERT_EQ(agent.call("send " + engine->main_address().to_hex() + " 3 1000 80"), "ok");
  for (int i = 0; i < 1000; ++i) {
    {
      std::lock_guard lock(mu);
      if (got.size() >= 3) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::lock_guard lock(mu);
  ASSERT_EQ(got.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    std::vector<uint8_t> m(1000);
    tools::fill_pattern(m.data(), 1000, 80 + i);
    EXPECT_NE(std::find(got.begin(), got.end(), testing::hash_hex(m.data(), 1000) + ":1000"), got.end()) << i;
  }
}

TEST_P(IpcGpuTest, ThousandsInFlightCompleteExactlyOnce) {
  constexpr size_t kThreads = 4, kPerThread = 1250, kChunk = 256;
  constexpr size_t kTotal = kThreads * kPerThread;
  const size_t region = kTotal * kChunk;
  std::vector<std::atomic<int>> calls(kTotal);
  std::atomic<size_t> errors{0}, finished{0};
  AgentProcess agent(config(), region);
  ASSERT_TRUE(agent.started());
  auto engine = make_engine();
  ASSERT_TRUE(engine);
  GpuSource src(*engine, region, 51);
  Shadow shadow(region);
  shadow.write(src.host.data(), 0, region);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (size_t k = 0; k < kPerThread; ++k) {
        const size_t i = t * kPerThread + k;
        auto id = engine->submit_write({src.reg.handle, i * kChunk, agent.desc(), i * kChunk, kChunk, 61},
                                       Completion::callback([&, i](const Status& s) {
                                         calls[i].fetch_add(1);
                                         if (!s.ok()) errors.fetch_add(1);
                                         finished.fetch_add(1);
                                       }));
        if (!id.ok()) calls[i].fetch_add(1000);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_TRUE(agent.expect_imms(61, kTotal));
  for (int i = 0; i < 12000 && finished.load() < kTotal; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(errors.load(), 0u);
  for (size_t i = 0; i < kTotal; ++i) ASSERT_EQ(calls[i].load(), 1) << "request " << i;
  EXPECT_EQ(agent.hash(0, region), shadow.hash());
  EXPECT_EQ(agent.count(61), 0u);
}

INSTANTIATE_TEST_SUITE_P(Ipc, IpcGpuTest, ::testing::Values(size_t{1}, size_t{4}),
                         [](const auto& info) { return "ipc_" + std::to_string(info.param) + "dom"; });

}  // namespace
}  // namespace fabric_lib::device_tests

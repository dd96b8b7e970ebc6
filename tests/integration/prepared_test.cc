// Prepared requests between processes, over the whole provider matrix: one prepared paged write
// reused 10,000 times with changing page lists and imms, and prepared scatters to three agents
// reused with changing lengths, offsets and imms. Bytes are checked by hash against a local
// shadow, imm counts exactly (then nothing left over).
#include <algorithm>
#include <map>
#include <numeric>
#include <random>

#include "integration/engine_fixture.h"

namespace fabric_lib::testing {
namespace {

using PreparedTest = EngineTest;

// Submits in flight at once draw their destination pages (or slots) from disjoint sets, and a
// batch is complete before the next starts: the final bytes are then those of the last write to
// each place, whatever order the network delivered in.
TEST_P(PreparedTest, PagedWritesReusedTenThousandTimes) {
  constexpr uint64_t kPage = 256, kSrcStride = kPage + 64, kDstStride = kPage + 32;
  constexpr uint64_t kSrcOffset = 40, kDstOffset = 24;
  constexpr uint32_t kSrcPages = 96, kDstPages = 256;
  constexpr size_t kSubmits = 10000, kBatch = 32, kMaxPagesPerSubmit = 6;
  constexpr uint32_t kImmBase = 4000, kImms = 5;
  const size_t region = kDstOffset + kDstPages * kDstStride;
  AgentProcess agent(GetParam(), region);
  ASSERT_TRUE(agent.started());
  auto engine = make_engine();
  ASSERT_TRUE(engine);
  SourceBuffer src(*engine, kSrcOffset + kSrcPages * kSrcStride, 31);
  StopEngineFirst stop_first(engine.get());
  Shadow shadow(region);

  PagedWriteTemplate t;
  t.src = src.reg.handle;
  t.dst = agent.desc();
  t.page_length = kPage;
  t.src_stride = kSrcStride;
  t.dst_stride = kDstStride;
  t.src_offset = kSrcOffset;
  t.dst_offset = kDstOffset;
  t.src_page_bound = kSrcPages;
  t.dst_page_bound = kDstPages;
  Result<PreparedPagedWrites> prepared = engine->prepare_paged_writes(t);
  ASSERT_TRUE(prepared.ok()) << prepared.status().to_string();

  std::mt19937 rng(GetParam().domains * 977 + 5);
  std::vector<uint32_t> slots(kDstPages);
  std::iota(slots.begin(), slots.end(), 0);
  std::map<uint32_t, uint64_t> expected;  // imm -> imms the agent must count
  uint64_t without_imm = 0;
  CompletionCounter done;
  for (size_t begin = 0; begin < kSubmits; begin += kBatch) {
    std::shuffle(slots.begin(), slots.end(), rng);
    size_t next_slot = 0;
    const size_t n = std::min(kBatch, kSubmits - begin);
    for (size_t k = 0; k < n; ++k) {
      const size_t i = begin + k;
      const size_t pages = 1 + rng() % kMaxPagesPerSubmit;
      std::vector<uint32_t> src_pages(pages), dst_pages(pages);
      for (size_t p = 0; p < pages; ++p) {
        src_pages[p] = static_cast<uint32_t>(rng() % kSrcPages);  // sources may repeat
        dst_pages[p] = slots[next_slot++];                          // destinations never do within a batch
        shadow.write(src, kSrcOffset + src_pages[p] * kSrcStride, kDstOffset + dst_pages[p] * kDstStride, kPage);
      }
      std::optional<uint32_t> imm;
      if (i % 11 != 10) imm = kImmBase + static_cast<uint32_t>(i % kImms);  // every 11th carries none
      if (imm) {
        expected[*imm] += imm_count_of_paged_writes(pages);
      } else {
        ++without_imm;
      }
      Result<TransferId> id = engine->submit_prepared(*prepared, src_pages, dst_pages, imm, Completion::counter(done));
      ASSERT_TRUE(id.ok()) << "submit " << i << ": " << id.status().to_string();
    }
    wait_all(done, begin + n);
    ASSERT_EQ(done.errors, 0u) << "after submit " << begin + n;
  }
  EXPECT_GT(without_imm, 0u);
  for (const auto& [imm, n] : expected) {
    EXPECT_TRUE(agent.expect_imms(imm, n)) << "imm " << imm << ": " << agent.count(imm) << " of " << n;
    EXPECT_EQ(agent.count(imm), 0u) << "imm " << imm;
  }
  EXPECT_EQ(agent.hash(0, region), shadow.hash());
  EXPECT_EQ(engine->stats().requests_submitted, kSubmits);
}

constexpr size_t kPeers = 3;
constexpr uint64_t kScatterRegion = 2 << 20;
constexpr uint64_t kWindow = 512 << 10;  // each target's source and destination window
constexpr size_t kSlots = 4;             // submits in flight write disjoint quarters of each window
constexpr uint64_t kSlot = kWindow / kSlots;

// Target t: peer, src window [t * kWindow, +kWindow), dst window at dst_offset. Peer 1 has two
// targets (two disjoint destination windows).
const std::vector<PreparedScatterTarget> kTargets = {
    {0, 0 * kWindow, kWindow, 0, kWindow},
    {1, 1 * kWindow, kWindow, 0, kWindow},
    {2, 2 * kWindow, kWindow, 256 << 10, kWindow},
    {1, 3 * kWindow, kWindow, 1 << 20, kWindow},
};

// What a prepared-scatter test starts from: kPeers agents with kScatterRegion-byte regions, their
// PeerGroup, an engine (stopped first when the rig goes), a patterned source and a shadow of each
// agent's region. Members in this order: destroyed in reverse, the engine stops before the source
// it writes from is unregistered.
struct PreparedScatterRig {
  std::vector<std::unique_ptr<AgentProcess>> agents;
  std::unique_ptr<TransferEngine> engine;
  std::optional<SourceBuffer> src;
  std::optional<StopEngineFirst> stop_first;
  std::vector<Shadow> shadows = std::vector<Shadow>(kPeers, Shadow(kScatterRegion));
  PeerGroup group;
};

// Starts the rig: agents on `param`, `engine` (made for `param`), a source of `src_bytes` from `seed`.
void start(PreparedScatterRig& rig, const ProviderConfig& param, std::unique_ptr<TransferEngine> engine,
           uint64_t src_bytes, uint64_t seed) {
  std::vector<MrDesc> descs;
  for (size_t i = 0; i < kPeers; ++i) {
    rig.agents.push_back(std::make_unique<AgentProcess>(param, kScatterRegion));
    ASSERT_TRUE(rig.agents.back()->started());
    descs.push_back(rig.agents.back()->desc());
  }
  rig.engine = std::move(engine);
  ASSERT_TRUE(rig.engine);
  rig.src.emplace(*rig.engine, src_bytes, seed);
  rig.stop_first.emplace(rig.engine.get());
  Result<PeerGroup> group = rig.engine->add_peer_group(descs);
  ASSERT_TRUE(group.ok()) << group.status().to_string();
  rig.group = *group;
}

// Each (peer, imm) counted exactly its expected imms (then nothing left over), every region equal
// to its shadow.
void expect_delivered(const PreparedScatterRig& rig, const std::map<std::pair<size_t, uint32_t>, uint64_t>& expected) {
  for (const auto& [key, n] : expected) {
    const auto& [peer, imm] = key;
    EXPECT_TRUE(rig.agents[peer]->expect_imms(imm, n)) << "peer " << peer << " imm " << imm << ": "
                                                        << rig.agents[peer]->count(imm) << " of " << n;
    EXPECT_EQ(rig.agents[peer]->count(imm), 0u) << "peer " << peer << " imm " << imm;
  }
  for (size_t p = 0; p < kPeers; ++p) {
    EXPECT_EQ(rig.agents[p]->hash(0, kScatterRegion), rig.shadows[p].hash()) << "peer " << p;
  }
}

TEST_P(PreparedTest, ScattersToThreeAgentsReusedWithChangingSlices) {
  PreparedScatterRig rig;
  ASSERT_NO_FATAL_FAILURE(start(rig, GetParam(), make_engine(), kTargets.size() * kWindow, 41));
  auto& [agents, engine, src, stop_first, shadows, group] = rig;

  std::mt19937 rng(GetParam().domains * 131 + 7);
  std::map<std::pair<size_t, uint32_t>, uint64_t> expected;  // (peer, imm) -> imms
  uint64_t submitted = 0;
  for (ScatterSharding sharding : {ScatterSharding::kByPeer, ScatterSharding::kByBytes}) {
    SCOPED_TRACE(sharding == ScatterSharding::kByPeer ? "by peer" : "by bytes");
    ScatterTemplate t;
    t.src = src->reg.handle;
    t.group = &group;
    t.targets = kTargets;
    t.sharding = sharding;
    Result<PreparedScatter> prepared = engine->prepare_scatter(t);
    ASSERT_TRUE(prepared.ok()) << prepared.status().to_string();
    ASSERT_EQ(prepared->targets(), kTargets.size());
    constexpr size_t kSubmits = 160;
    const uint32_t imm_base = sharding == ScatterSharding::kByPeer ? 5000 : 5100;
    CompletionCounter done;
    for (size_t begin = 0; begin < kSubmits; begin += kSlots) {
      for (size_t k = 0; k < kSlots; ++k) {
        const size_t i = begin + k;
        std::vector<ScatterSlice> slices;
        for (size_t ti = 0; ti < kTargets.size(); ++ti) {
          const PreparedScatterTarget& target = kTargets[ti];
          // Lengths 0 .. a full slot (with 4 domains a long one shards by bytes); random offsets.
          const uint64_t in_slot = rng() % 4096;
          uint64_t length = rng() % 8 == 0 ? 0 : rng() % (kSlot - in_slot + 1);
          if (rng() % 4 == 0) length = kSlot - in_slot;
          const uint64_t offset_in_dst = k * kSlot + in_slot;
          const uint64_t offset_in_src = rng() % (kWindow - length + 1);
          slices.push_back({length, offset_in_src, offset_in_dst});
          shadows[target.peer].write(*src, target.src_offset + offset_in_src, target.dst_offset + offset_in_dst, length);
        }
        const uint32_t imm = imm_base + static_cast<uint32_t>(i % 3);
        for (size_t ti = 0; ti < kTargets.size(); ++ti) {
          expected[{kTargets[ti].peer, imm}] +=
              imm_count_of_scatter_target(slices[ti].length, sharding, RoundRobin{}, domains());
        }
        Result<TransferId> id = engine->submit_prepared(*prepared, slices, imm, Completion::counter(done));
        ASSERT_TRUE(id.ok()) << "submit " << i << ": " << id.status().to_string();
        ++submitted;
      }
      wait_all(done, begin + kSlots);
      ASSERT_EQ(done.errors, 0u);
    }
  }
  expect_delivered(rig, expected);
  EXPECT_EQ(engine->stats().requests_submitted, submitted);
}

// A prepared scatter whose 24 targets take turns among the three members (as MoE dispatch
// prepares one per expert slot): each submit's WRs are grouped by target, and a member's slices
// of one length go out as runs. Slices of 2 KiB at changing offsets, some empty (an imm alone,
// or nothing without one), by peer and by bytes: every slice lands, every imm is counted.
TEST_P(PreparedTest, ScattersWhoseTargetsTakeTurnsAmongMembersLand) {
  constexpr size_t kTurnTargets = 24;
  constexpr uint64_t kTurnWindow = 16 << 10;  // per target, source and destination
  constexpr uint64_t kSlice = 2048;
  PreparedScatterRig rig;
  ASSERT_NO_FATAL_FAILURE(start(rig, GetParam(), make_engine(), kTurnTargets * kTurnWindow, 53));
  auto& [agents, engine, src, stop_first, shadows, group] = rig;
  std::vector<PreparedScatterTarget> targets;
  for (size_t t = 0; t < kTurnTargets; ++t) {
    // Target t: member t % 3; its destination window the (t / 3)-th of that member's, in reverse.
    targets.push_back({static_cast<uint32_t>(t % kPeers), t * kTurnWindow, kTurnWindow,
                       (kTurnTargets / kPeers - 1 - t / kPeers) * kTurnWindow, kTurnWindow});
  }
  std::mt19937 rng(GetParam().domains * 53 + 3);
  std::map<std::pair<size_t, uint32_t>, uint64_t> expected;  // (peer, imm) -> imms
  for (ScatterSharding sharding : {ScatterSharding::kByPeer, ScatterSharding::kByBytes}) {
    SCOPED_TRACE(sharding == ScatterSharding::kByPeer ? "by peer" : "by bytes");
    ScatterTemplate t;
    t.src = src->reg.handle;
    t.group = &group;
    t.targets = targets;
    t.sharding = sharding;
    Result<PreparedScatter> prepared = engine->prepare_scatter(t);
    ASSERT_TRUE(prepared.ok()) << prepared.status().to_string();
    const uint32_t imm = sharding == ScatterSharding::kByPeer ? 6000 : 6100;
    for (int submit = 0; submit < 12; ++submit) {
      std::vector<ScatterSlice> slices;
      for (size_t ti = 0; ti < kTurnTargets; ++ti) {
        const uint64_t length = rng() % 6 == 0 ? 0 : kSlice;
        const uint64_t offset_in_src = (rng() % (kTurnWindow / kSlice)) * kSlice;
        const uint64_t offset_in_dst = (rng() % (kTurnWindow / kSlice)) * kSlice;
        slices.push_back({length, offset_in_src, offset_in_dst});
        shadows[targets[ti].peer].write(*src, targets[ti].src_offset + offset_in_src,
                                        targets[ti].dst_offset + offset_in_dst, length);
        expected[{targets[ti].peer, imm}] += imm_count_of_scatter_target(length, sharding, RoundRobin{}, domains());
      }
      // One at a time: a later submit may write where an earlier one did.
      CompletionCounter done;
      Result<TransferId> id = engine->submit_prepared(*prepared, slices, imm, Completion::counter(done));
      ASSERT_TRUE(id.ok()) << "submit " << submit << ": " << id.status().to_string();
      wait_all(done, 1);
      ASSERT_EQ(done.errors, 0u) << "submit " << submit;
    }
  }
  expect_delivered(rig, expected);
}

INSTANTIATE_TEST_SUITE_P(Matrix, PreparedTest, ::testing::ValuesIn(provider_matrix()), matrix_name);

}  // namespace
}  // namespace fabric_lib::testing

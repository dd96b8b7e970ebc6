// Scatter (with and without a pre-resolved PeerGroup, by peer and by bytes) and barrier across
// three target processes.
#include <map>
#include <optional>

#include "integration/engine_fixture.h"

namespace fabric_lib::testing {
namespace {

constexpr size_t kBarrierPeers = 3;
constexpr size_t kRegion = 1 << 20;

struct ScatterCase {
  ScatterSharding sharding;
  bool use_group;
};

// What a scatter test starts from and checks against: kBarrierPeers agents with kRegion-byte regions,
// an engine, a patterned source, and a shadow of each agent's region.
struct ScatterRig {
  std::vector<std::unique_ptr<AgentProcess>> agents;
  std::unique_ptr<TransferEngine> engine;
  std::optional<SourceBuffer> src;
  std::vector<Shadow> shadows = std::vector<Shadow>(kBarrierPeers, Shadow(kRegion));

  // Every peer's region equals its shadow, and the peer counted exactly expected[p] imms `imm`.
  void expect_delivered(uint32_t imm, const std::vector<uint64_t>& expected) const {
    // Delivery-complete (every provider of the matrix): at the Ok every slice is in place.
    for (size_t p = 0; p < kBarrierPeers; ++p) EXPECT_EQ(agents[p]->hash(0, kRegion), shadows[p].hash()) << "peer " << p;
    for (size_t p = 0; p < kBarrierPeers; ++p) EXPECT_EQ(agents[p]->expect_exactly(imm, expected[p]), "ok") << "peer " << p;
  }
};

class ScatterTest : public EngineTest {
 protected:
  // Starts the rig's agents and engine and fills its source from `seed`.
  void start(ScatterRig& rig, uint64_t seed) {
    for (size_t i = 0; i < kBarrierPeers; ++i) {
      rig.agents.push_back(std::make_unique<AgentProcess>(GetParam(), kRegion));
      ASSERT_TRUE(rig.agents.back()->started());
    }
    rig.engine = make_engine();
    ASSERT_TRUE(rig.engine);
    rig.src.emplace(*rig.engine, kRegion, seed);
  }

  // Per peer: its agent's descriptor, then decoded copies of it (each another identity to the
  // engine), `per_peer` names in all.
  void name_peers(const ScatterRig& rig, size_t per_peer, std::vector<std::vector<MrDesc>>& names) {
    names.assign(kBarrierPeers, {});
    for (size_t p = 0; p < kBarrierPeers; ++p) {
      names[p].push_back(rig.agents[p]->desc());
      while (names[p].size() < per_peer) {
        Result<MrDesc> decoded = MrDesc::from_bytes(rig.agents[p]->desc().to_bytes());
        ASSERT_TRUE(decoded.ok()) << decoded.status().to_string();
        names[p].push_back(*decoded);
      }
    }
  }

  // Submits `req` (kept, by const reference) twice and checks both deliveries: every slice in
  // place, and each peer (target t's is peer_of[t]) counting twice its targets' imms.
  void submit_twice_and_check(ScatterRig& rig, const ScatterRequest& req, const std::vector<size_t>& peer_of) {
    Outcomes out(2);
    std::vector<uint64_t> expected(kBarrierPeers, 0);
    for (size_t t = 0; t < req.targets.size(); ++t) expected[peer_of[t]] += 2 * imm_count_of(req, t, domains());
    ASSERT_TRUE(rig.engine->submit_scatter(req, out.sink(0)).ok());
    ASSERT_TRUE(rig.engine->submit_scatter(req, out.sink(1)).ok());
    EXPECT_TRUE(out.all_ok());
    rig.expect_delivered(*req.imm, expected);
  }

  void run(const ScatterCase& sc) {
    Outcomes out(1);  // before the engine, which may call it until stopped
    ScatterRig rig;
    ASSERT_NO_FATAL_FAILURE(start(rig, 21));
    auto& [agents, engine, src, shadows] = rig;

    ScatterRequest req;
    req.src = src->reg.handle;
    req.imm = 31;
    req.sharding = sc.sharding;
    PeerGroup group;
    if (sc.use_group) {
      std::vector<MrDesc> descs;
      for (auto& a : agents) descs.push_back(a->desc());
      auto g = engine->add_peer_group(descs);
      ASSERT_TRUE(g.ok()) << g.status().to_string();
      group = *g;
      EXPECT_EQ(group.size(), kBarrierPeers);
      req.group = &group;
    }
    // Target t gets a different slice, length and offset; peer 1 gets two slices.
    const std::vector<std::pair<size_t, ScatterTarget>> layout = {
        {0, {4096, 0, 100}}, {1, {300000, 5000, 0}}, {2, {1, 777, 9}}, {1, {70000, 400000, 600000}}};
    for (const auto& [peer, target] : layout) {
      ScatterTarget t = target;
      if (sc.use_group) {
        t.peer = static_cast<uint32_t>(peer);
      } else {
        t.dst = agents[peer]->desc();
      }
      req.targets.push_back(t);
      shadows[peer].write(*src, t.src_offset, t.dst_offset, t.length);
    }
    std::vector<uint64_t> expected(kBarrierPeers, 0);
    for (size_t i = 0; i < layout.size(); ++i) expected[layout[i].first] += imm_count_of(req, i, domains());

    ASSERT_TRUE(engine->submit_scatter(req, out.sink(0)).ok());
    EXPECT_TRUE(out.all_ok());
    rig.expect_delivered(31, expected);
  }
};

// Every target's slice lands at its offset and each peer counts the imms imm_count_of() gives.
TEST_P(ScatterTest, ByPeerWithoutGroup) { run({ScatterSharding::kByPeer, false}); }
TEST_P(ScatterTest, ByPeerWithPeerGroup) { run({ScatterSharding::kByPeer, true}); }
TEST_P(ScatterTest, ByBytesWithoutGroup) { run({ScatterSharding::kByBytes, false}); }
TEST_P(ScatterTest, ByBytesWithPeerGroup) { run({ScatterSharding::kByBytes, true}); }

// Targets naming one peer's region through many descriptors at once: the agent's descriptor
// (copies of it are one identity to the engine), and separately decoded copies (each another
// identity: 3 peers x 8 make 24 entries, repeated by 48 targets). Each target's slice lands at its
// offset, each peer counts its imms, by peer and by bytes; the same request (kept, by const
// reference) submitted twice delivers twice.
TEST_P(ScatterTest, ManyDescriptorsOfFewPeersLandAndCount) {
  for (ScatterSharding sharding : {ScatterSharding::kByPeer, ScatterSharding::kByBytes}) {
    ScatterRig rig;
    ASSERT_NO_FATAL_FAILURE(start(rig, 23));
    std::vector<std::vector<MrDesc>> names;
    ASSERT_NO_FATAL_FAILURE(name_peers(rig, 8, names));
    ScatterRequest req{rig.src->reg.handle, {}, 37, sharding};
    std::vector<size_t> peer_of;
    for (size_t t = 0; t < 48; ++t) {
      const size_t peer = (t * 5) % kBarrierPeers;
      const uint64_t length = 1000 + 97 * t;
      const ScatterTarget target{length, 4096 * t, 9000 * t + 13, names[peer][(t / kBarrierPeers) % names[peer].size()], 0};
      req.targets.push_back(target);
      peer_of.push_back(peer);
      rig.shadows[peer].write(*rig.src, target.src_offset, target.dst_offset, target.length);
    }
    ASSERT_NO_FATAL_FAILURE(submit_twice_and_check(rig, req, peer_of));
  }
}

// More descriptors than the submit's table of descriptors holds (it has at most 128 slots and
// probes 8): 3 peers x 81 identities, named by 320 targets, so many find no slot and are checked
// and kept as entries of their own while the others share theirs (and their WRs are grouped by
// target). Every slice lands, every imm is counted, twice.
TEST_P(ScatterTest, MoreDescriptorsThanTheTableHoldsLandAndCount) {
  ScatterRig rig;
  ASSERT_NO_FATAL_FAILURE(start(rig, 29));
  constexpr size_t kNames = 81;
  std::vector<std::vector<MrDesc>> names;
  ASSERT_NO_FATAL_FAILURE(name_peers(rig, kNames, names));
  ScatterRequest req{rig.src->reg.handle, {}, 43, ScatterSharding::kByPeer};
  std::vector<size_t> peer_of;
  for (size_t t = 0; t < 320; ++t) {
    const size_t peer = t % kBarrierPeers;
    const ScatterTarget target{200 + 64 * (t % 7), 2048 * t, 3000 * t + 5, names[peer][(t / kBarrierPeers) % kNames], 0};
    req.targets.push_back(target);
    peer_of.push_back(peer);
    rig.shadows[peer].write(*rig.src, target.src_offset, target.dst_offset, target.length);
  }
  ASSERT_NO_FATAL_FAILURE(submit_twice_and_check(rig, req, peer_of));
}

// Targets taking turns among the peers (as MoE dispatch names them), one length, destinations
// apart: their WRs are grouped by target and each peer's go out as runs of WRs that do not
// continue each other (the ipc domain gathers them). Through descriptors and through a PeerGroup,
// by peer and by bytes (one rig, one request after another, an imm each): every slice lands,
// every imm is counted.
TEST_P(ScatterTest, TargetsTakingTurnsWithOneLengthLandAsRuns) {
  Outcomes out(4);
  ScatterRig rig;
  ASSERT_NO_FATAL_FAILURE(start(rig, 31));
  auto& [agents, engine, src, shadows] = rig;
  std::vector<MrDesc> descs;
  for (auto& a : agents) descs.push_back(a->desc());
  Result<PeerGroup> group = engine->add_peer_group(descs);
  ASSERT_TRUE(group.ok()) << group.status().to_string();
  std::map<uint32_t, std::vector<uint64_t>> expected;  // imm -> per peer
  size_t request = 0;
  for (bool use_group : {false, true}) {
    for (ScatterSharding sharding : {ScatterSharding::kByPeer, ScatterSharding::kByBytes}) {
      SCOPED_TRACE(std::string(use_group ? "group, " : "descriptors, ") +
                   (sharding == ScatterSharding::kByPeer ? "by peer" : "by bytes"));
      const uint32_t imm = 47 + static_cast<uint32_t>(request);
      ScatterRequest req{src->reg.handle, {}, imm, sharding};
      if (use_group) req.group = &*group;
      std::vector<uint64_t>& counts = expected[imm];
      counts.assign(kBarrierPeers, 0);
      for (size_t t = 0; t < 60; ++t) {
        const size_t peer = t % kBarrierPeers;
        // 4 KiB each; a peer's slices 36 KiB apart in reverse order, sources 8 KiB apart (each
        // request's at another quarter of the source).
        ScatterTarget target{4096, 8192 * t + 1024 * request, 12288 * (59 - t) + 64 * peer, MrDesc(), 0};
        if (use_group) {
          target.peer = static_cast<uint32_t>(peer);
        } else {
          target.dst = descs[peer];
        }
        req.targets.push_back(target);
        shadows[peer].write(*src, target.src_offset, target.dst_offset, target.length);
        counts[peer] += imm_count_of(req, t, domains());
      }
      ASSERT_TRUE(engine->submit_scatter(req, out.sink(request)).ok());
      ASSERT_TRUE(out.wait_until(request + 1, bounds::kRequests)) << "request " << request;
      ++request;
    }
  }
  EXPECT_TRUE(out.all_ok());
  for (const auto& [imm, counts] : expected) rig.expect_delivered(imm, counts);
}

// A barrier delivers exactly one imm to each peer and completes once.
TEST_P(ScatterTest, BarrierReachesEveryPeerOnce) {
  std::vector<std::unique_ptr<AgentProcess>> agents;
  std::vector<MrDesc> descs;
  for (size_t i = 0; i < kBarrierPeers; ++i) {
    agents.push_back(std::make_unique<AgentProcess>(GetParam(), 4096));
    ASSERT_TRUE(agents.back()->started());
    descs.push_back(agents.back()->desc());
  }
  Outcomes out(1);
  auto engine = make_engine();
  ASSERT_TRUE(engine);
  ASSERT_TRUE(engine->submit_barrier(41, descs, out.sink(0)).ok());
  for (size_t p = 0; p < kBarrierPeers; ++p) EXPECT_TRUE(agents[p]->expect_imms(41, kImmCountOfBarrierPerPeer)) << "peer " << p;
  EXPECT_TRUE(out.all_ok());
  for (size_t p = 0; p < kBarrierPeers; ++p) EXPECT_EQ(agents[p]->quiet(41, 0), "ok") << "peer " << p;
}

INSTANTIATE_TEST_SUITE_P(Matrix, ScatterTest, ::testing::ValuesIn(provider_matrix()), matrix_name);

}  // namespace
}  // namespace fabric_lib::testing

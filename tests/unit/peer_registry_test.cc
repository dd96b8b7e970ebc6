// PeerRegistry::for_desc: the peer of a destination descriptor, and the cache that answers a
// descriptor seen before without hashing its addresses. The cache must never answer with paths
// that no longer match the descriptor (a restarted peer keeps domain 0's address but not always
// the others, and a ping may move a path's address too).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/peer_registry.h"
#include "support/instant_domain.h"

namespace fabric_lib::detail {
namespace {

std::vector<uint8_t> address(const std::string& text) { return std::vector<uint8_t>(text.begin(), text.end()); }

// A two-domain descriptor whose domains live at `a0` and `a1`.
MrDesc desc_at(const std::string& a0, const std::string& a1) {
  std::vector<MrDomainEntry> domains(2);
  domains[0].address = *DomainAddress::from_bytes(address(a0));
  domains[1].address = *DomainAddress::from_bytes(address(a1));
  domains[0].rkey = domains[1].rkey = 7;
  Result<MrDesc> d =
      MrDesc::create(TransportKind::kLibfabric, MemoryKind::kHost, 0x1000, 4096, Access::kRemoteWrite, std::move(domains));
  EXPECT_TRUE(d.ok()) << d.status().to_string();
  return *d;
}

class PeerRegistryTest : public ::testing::Test {
 protected:
  // No handle is ever inserted here, so the domains are never called.
  testing::InstantDomain d0_{nullptr}, d1_{nullptr};
  std::vector<transport::Domain*> domains_{&d0_, &d1_};
  PeerRegistry peers_{2, nullptr};
};

TEST_F(PeerRegistryTest, ADescriptorItsCopiesAndAnEqualOneResolveToOnePeer) {
  const MrDesc a = desc_at("peer-a/0", "peer-a/1");
  PeerEntry& first = peers_.for_desc(a, domains_);
  const MrDesc copy = a;
  EXPECT_EQ(&peers_.for_desc(copy, domains_), &first);
  EXPECT_EQ(&peers_.for_desc(a, domains_), &first);
  // Decoded afresh: another object with the same content.
  const MrDesc decoded = *MrDesc::from_bytes(a.to_bytes());
  EXPECT_EQ(&peers_.for_desc(decoded, domains_), &first);
  EXPECT_EQ(first.key, address("peer-a/0"));
  EXPECT_EQ(first.paths[1].address, address("peer-a/1"));
}

TEST_F(PeerRegistryTest, ARestartedPeersDescriptorsEachPointThePathsAtTheirOwnAddresses) {
  const MrDesc before = desc_at("peer-a/0", "peer-a/1-first-run");
  const MrDesc after = desc_at("peer-a/0", "peer-a/1-second-run");
  PeerEntry& peer = peers_.for_desc(before, domains_);
  EXPECT_EQ(peer.paths[1].address, address("peer-a/1-first-run"));
  EXPECT_EQ(&peers_.for_desc(after, domains_), &peer);
  EXPECT_EQ(peer.paths[1].address, address("peer-a/1-second-run"));
  // The first descriptor again: answered from the cache only if nothing moved since — here the
  // second one moved the path, so it is resolved afresh and the path points back.
  EXPECT_EQ(&peers_.for_desc(before, domains_), &peer);
  EXPECT_EQ(peer.paths[1].address, address("peer-a/1-first-run"));
  EXPECT_EQ(&peers_.for_desc(after, domains_), &peer);
  EXPECT_EQ(peer.paths[1].address, address("peer-a/1-second-run"));
}

TEST_F(PeerRegistryTest, APathMovedByAPingIsPointedBackByTheNextUseOfADescriptor) {
  const MrDesc a = desc_at("peer-a/0", "peer-a/1");
  PeerEntry& peer = peers_.for_desc(a, domains_);
  const uint64_t epoch = peer.address_epoch;
  peers_.set_address(peer, 1, address("peer-a/1-from-a-ping"), d1_);
  EXPECT_GT(peer.address_epoch, epoch);
  EXPECT_EQ(peer.paths[1].address, address("peer-a/1-from-a-ping"));
  EXPECT_EQ(&peers_.for_desc(a, domains_), &peer);
  EXPECT_EQ(peer.paths[1].address, address("peer-a/1"));
  // The same address again moves nothing.
  const uint64_t settled = peer.address_epoch;
  peers_.set_address(peer, 1, address("peer-a/1"), d1_);
  EXPECT_EQ(peer.address_epoch, settled);
}

TEST_F(PeerRegistryTest, MoreDescriptorsThanCacheSlotsEachResolveToTheirOwnPeer) {
  std::vector<MrDesc> descs;
  for (int i = 0; i < 600; ++i) {
    descs.push_back(desc_at("peer-" + std::to_string(i) + "/0", "peer-" + std::to_string(i) + "/1"));
  }
  for (int round = 0; round < 2; ++round) {
    for (int k = 0; k < 600; ++k) {
      const int i = round == 0 ? k : 599 - k;
      PeerEntry& peer = peers_.for_desc(descs[i], domains_);
      ASSERT_EQ(peer.key, address("peer-" + std::to_string(i) + "/0")) << "descriptor " << i;
      ASSERT_EQ(peer.paths[1].address, address("peer-" + std::to_string(i) + "/1")) << "descriptor " << i;
    }
  }
}

}  // namespace
}  // namespace fabric_lib::detail

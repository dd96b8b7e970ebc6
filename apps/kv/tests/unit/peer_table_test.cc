// The liveness bookkeeping (an app-internal header): who is overdue, restarts, idle peers.
#include <gtest/gtest.h>

#include "../../src/peer_table.h"

namespace fabric_lib::kv {
namespace {

using std::chrono::milliseconds;

DomainAddress peer(uint8_t b) { return *DomainAddress::from_bytes(std::vector<uint8_t>(8, b)); }

TEST(KvPeerTable, SilentActivePeersAreOverdueOnce) {
  PeerTable t;
  const auto t0 = PeerTable::Time{} + std::chrono::hours(1);
  t.watch(peer(1), t0);
  auto active = [](const DomainAddress&) { return true; };
  EXPECT_TRUE(t.overdue(t0 + milliseconds(900), milliseconds(1000), active).empty());
  EXPECT_EQ(t.overdue(t0 + milliseconds(1100), milliseconds(1000), active).size(), 1u);
  EXPECT_TRUE(t.is_dead(peer(1)));
  EXPECT_TRUE(t.overdue(t0 + milliseconds(1200), milliseconds(1000), active).empty()) << "reported once";
  EXPECT_FALSE(t.heard(peer(1), 7, t0 + milliseconds(1300)));
  EXPECT_FALSE(t.is_dead(peer(1))) << "heard from again";
}

TEST(KvPeerTable, ProgressCountsAndAnIdleSpellDoesNot) {
  PeerTable t;
  const auto t0 = PeerTable::Time{} + std::chrono::hours(1);
  bool busy = true;
  auto active = [&](const DomainAddress&) { return busy; };
  t.watch(peer(2), t0);
  t.touch(peer(2), t0 + milliseconds(800));  // imms arrived
  EXPECT_TRUE(t.overdue(t0 + milliseconds(1500), milliseconds(1000), active).empty());
  busy = false;  // nothing in common for a long time
  EXPECT_TRUE(t.overdue(t0 + milliseconds(5000), milliseconds(1000), active).empty());
  busy = true;  // a new request: its silence starts counting now
  t.watch(peer(2), t0 + milliseconds(5001));
  EXPECT_TRUE(t.overdue(t0 + milliseconds(5100), milliseconds(1000), active).empty());
  EXPECT_EQ(t.overdue(t0 + milliseconds(6200), milliseconds(1000), active).size(), 1u);
}

TEST(KvPeerTable, ANewIncarnationIsARestartAndIdlePeersAreForgotten) {
  PeerTable t;
  const auto t0 = PeerTable::Time{} + std::chrono::hours(1);
  EXPECT_FALSE(t.heard(peer(3), 1, t0));
  EXPECT_FALSE(t.heard(peer(3), 1, t0 + milliseconds(1)));
  EXPECT_TRUE(t.heard(peer(3), 2, t0 + milliseconds(2)));
  auto idle = [](const DomainAddress&) { return false; };
  t.overdue(t0 + milliseconds(10), milliseconds(100), idle);
  EXPECT_EQ(t.size(), 1u);
  t.overdue(t0 + milliseconds(1000), milliseconds(100), idle);
  EXPECT_EQ(t.size(), 0u);
}

}  // namespace
}  // namespace fabric_lib::kv

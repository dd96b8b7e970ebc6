// RankInfo and route-block codecs: round trips, and every kind of damage refused.
#include <gtest/gtest.h>

#include <cstring>

#include "fabric_lib/moe/layout.h"
#include "fabric_lib/moe/wire.h"

namespace fabric_lib::moe {
namespace {

MrDesc some_desc(uint64_t ptr) {
  MrDomainEntry e;
  e.address = *DomainAddress::from_bytes(std::vector<uint8_t>{1, 2, 3, 4});
  e.rkey = 77;
  Result<MrDesc> d = MrDesc::create(TransportKind::kLibfabric, MemoryKind::kHost, ptr, 4096, Access::kRemoteWrite, {e});
  EXPECT_TRUE(d.ok());
  return *d;
}

RankInfo some_info() {
  RankInfo i;
  i.path = Path::kProxy;
  i.rank = 2;
  i.world = 4;
  i.domains = 2;
  i.fingerprint = 0x1234567890ull;
  i.host_id = 99;
  i.pid = 4242;
  i.address = *DomainAddress::from_bytes(std::vector<uint8_t>{9, 8, 7});
  i.route_recv = some_desc(0x1000);
  i.dispatch_recv = some_desc(0x2000);
  i.combine_recv = some_desc(0x3000);
  return i;
}

TEST(RankInfo, RoundTrips) {
  const RankInfo a = some_info();
  Result<RankInfo> b = RankInfo::decode(a.encode());
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(b->rank, 2u);
  EXPECT_EQ(b->world, 4u);
  EXPECT_EQ(b->domains, 2u);
  EXPECT_EQ(b->fingerprint, a.fingerprint);
  EXPECT_EQ(b->pid, 4242u);
  EXPECT_EQ(b->address, a.address);
  EXPECT_EQ(b->route_recv, a.route_recv);
  EXPECT_EQ(b->dispatch_recv, a.dispatch_recv);
  EXPECT_EQ(b->combine_recv, a.combine_recv);
  EXPECT_EQ(b->encode(), a.encode());
}

TEST(RankInfo, RefusesEveryTruncationAndTrailingBytes) {
  const std::vector<uint8_t> bytes = some_info().encode();
  for (size_t n = 0; n < bytes.size(); ++n) {
    Result<RankInfo> r = RankInfo::decode(std::span<const uint8_t>(bytes.data(), n));
    EXPECT_EQ(r.status().code(), ErrorCode::kMalformed) << "length " << n;
  }
  std::vector<uint8_t> longer = bytes;
  longer.push_back(0);
  EXPECT_EQ(RankInfo::decode(longer).status().code(), ErrorCode::kMalformed);
}

TEST(RankInfo, RefusesBadFields) {
  auto damaged = [](size_t at, uint8_t value) {
    std::vector<uint8_t> b = some_info().encode();
    b[at] = value;
    return RankInfo::decode(b).status();
  };
  EXPECT_EQ(damaged(0, 'X').code(), ErrorCode::kMalformed);                      // magic
  EXPECT_NE(damaged(4, 2).message().find("version 2"), std::string::npos);       // version
  EXPECT_EQ(damaged(5, 7).code(), ErrorCode::kMalformed);                        // path
  EXPECT_EQ(damaged(6, 9).code(), ErrorCode::kMalformed);                        // rank >= world
  EXPECT_EQ(damaged(10, 0).code(), ErrorCode::kMalformed);                       // 0 domains
  RankInfo direct = some_info();
  direct.path = Path::kDirect;
  EXPECT_EQ(RankInfo::decode(direct.encode()).status().code(), ErrorCode::kMalformed);  // no IPC handles
  RankInfo proxy = some_info();
  proxy.combine_recv = MrDesc();
  EXPECT_EQ(RankInfo::decode(proxy.encode()).status().code(), ErrorCode::kMalformed);
}

struct Block {
  alignas(64) uint8_t bytes[route_block_bytes(8)];
};

TEST(RouteBlock, RoundTripsAndChecksEveryField) {
  const std::vector<uint32_t> counts = {3, 0, 0, 9, 1, 0, 2, 5};
  Block b{};
  encode_route_block(3, 41, counts, b.bytes);
  Result<std::span<const uint32_t>> c = decode_route_block(b.bytes, 3, 41, 8, 20);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(std::vector<uint32_t>(c->begin(), c->end()), counts);
  EXPECT_EQ(decode_route_block(b.bytes, 2, 41, 8, 20).status().code(), ErrorCode::kMalformed);  // source
  EXPECT_EQ(decode_route_block(b.bytes, 3, 42, 8, 20).status().code(), ErrorCode::kMalformed);  // stale step
  EXPECT_EQ(decode_route_block(b.bytes, 3, 41, 7, 20).status().code(), ErrorCode::kMalformed);  // experts
  EXPECT_EQ(decode_route_block(b.bytes, 3, 41, 8, 19).status().code(), ErrorCode::kMalformed);  // total bound
  EXPECT_EQ(decode_route_block({b.bytes, 40}, 3, 41, 8, 20).status().code(), ErrorCode::kMalformed);
  for (size_t at = 0; at < kRouteHeaderBytes + 32; ++at) {
    Block d = b;
    d.bytes[at] ^= 0x10;
    EXPECT_FALSE(decode_route_block(d.bytes, 3, 41, 8, 20).ok()) << "flip at byte " << at;
  }
}

TEST(RouteBlock, ChecksumIsTheSumOfTerms) {
  // The GPU adds route_mix terms in any order: the sum must not depend on it.
  uint32_t a = 0, b = 0;
  for (uint32_t i = 0; i < 100; ++i) a += route_mix(i, i * 3);
  for (uint32_t i = 100; i-- > 0;) b += route_mix(i, i * 3);
  EXPECT_EQ(a, b);
  EXPECT_NE(route_finish(a, 1, 2, 3, 4), route_finish(a, 1, 3, 3, 4));
}

}  // namespace
}  // namespace fabric_lib::moe

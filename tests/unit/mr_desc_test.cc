// MrDesc: the remote memory descriptor that travels between processes as bytes or hex — its
// wire format (against the tests' own encoder, support/mr_desc_wire.h), equality, identity,
// create()'s checks. What the decoder refuses: mr_desc_decode_test.cc.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "fabric_lib/memory.h"
#include "support/mr_desc_wire.h"

namespace fabric_lib {
namespace {

using namespace testing::mr_wire;

// ---- round trips -------------------------------------------------------------------------------

// create() + to_bytes() produce exactly the documented wire format, and from_bytes() gives back
// an equal descriptor with every field intact (1 and 16 domains, addresses 1..256 bytes, blobs).
TEST(MrDesc, BytesRoundTripMatchesWireFormat) {
  for (size_t n : {size_t{1}, size_t{2}, size_t{7}, size_t{16}}) {
    for (bool blobs : {false, true}) {
      Wire w = valid_wire(n, blobs);
      w.transport = (n % 2) ? 1 : 2;
      w.kind = blobs ? 1 : 0;
      w.access = static_cast<uint8_t>(n % 4);
      w.length = 12345 + n;
      Result<MrDesc> created = create_from(w);
      ASSERT_TRUE(created.ok()) << created.status().to_string();
      const std::vector<uint8_t> expected = encode(w);
      const std::vector<uint8_t> bytes = created->to_bytes();
      ASSERT_EQ(bytes, expected) << "n=" << n << " blobs=" << blobs;

      Result<MrDesc> decoded = MrDesc::from_bytes(bytes);
      ASSERT_TRUE(decoded.ok()) << decoded.status().to_string();
      expect_fields(*decoded, w);
      EXPECT_TRUE(*decoded == *created);
      EXPECT_EQ(decoded->to_bytes(), bytes);
    }
  }
}

// to_hex() is the lower-case hex of to_bytes(); from_hex() accepts it (and upper case) back.
TEST(MrDesc, HexRoundTrip) {
  for (size_t n : {size_t{1}, size_t{16}}) {
    Wire w = valid_wire(n);
    MrDesc d = create_from(w).value();
    const std::string hex = d.to_hex();
    const std::vector<uint8_t> bytes = d.to_bytes();
    ASSERT_EQ(hex.size(), bytes.size() * 2);
    EXPECT_EQ(hex, to_hex(bytes));
    EXPECT_EQ(hex.substr(0, 8), "464c4d44");  // "FLMD"
    for (char c : hex) EXPECT_TRUE((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) << c;

    Result<MrDesc> back = MrDesc::from_hex(hex);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_TRUE(*back == d);
    expect_fields(*back, w);

    std::string upper = hex;
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    Result<MrDesc> back_upper = MrDesc::from_hex(upper);
    ASSERT_TRUE(back_upper.ok()) << back_upper.status().to_string();
    EXPECT_TRUE(*back_upper == d);
  }
}

// Extreme but legal values survive: 256-byte addresses, 1024-byte blobs, addr_base + length at
// exactly 2^64 - 1, all-ones keys and pointers.
TEST(MrDesc, RoundTripAtTheLimits) {
  Wire w;
  w.ptr = std::numeric_limits<uint64_t>::max();
  w.length = 1;
  w.access = 3;
  for (size_t i = 0; i < kMaxDomainsPerGroup; ++i) {
    WireDomain d = wire_domain(i, kMaxDomainAddressBytes, kMaxTransportBlobBytes);
    d.rkey = std::numeric_limits<uint64_t>::max() - i;
    d.addr_base = std::numeric_limits<uint64_t>::max() - 1;  // + length 1 = 2^64 - 1: no overflow
    w.domains.push_back(d);
  }
  Result<MrDesc> created = create_from(w);
  ASSERT_TRUE(created.ok()) << created.status().to_string();
  const std::vector<uint8_t> bytes = created->to_bytes();
  EXPECT_EQ(bytes, encode(w));
  EXPECT_EQ(bytes.size(), 26 + kMaxDomainsPerGroup * (2 + 256 + 8 + 8 + 2 + 1024));
  Result<MrDesc> decoded = MrDesc::from_bytes(bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.status().to_string();
  expect_fields(*decoded, w);
}

// operator== compares every field (and the empty descriptor equals only itself).
TEST(MrDesc, Equality) {
  const Wire base = valid_wire(3);
  const MrDesc a = create_from(base).value();
  const MrDesc b = create_from(base).value();
  const MrDesc a_copy = a;
  EXPECT_TRUE(a == b);
  EXPECT_TRUE(a == a_copy);
  EXPECT_TRUE(MrDesc() == MrDesc());
  EXPECT_FALSE(a == MrDesc());
  EXPECT_FALSE(MrDesc() == a);

  auto differs = [&](auto mutate, const char* what) {
    Wire w = base;
    mutate(w);
    Result<MrDesc> other = create_from(w);
    ASSERT_TRUE(other.ok()) << what;
    EXPECT_FALSE(a == *other) << what;
  };
  differs([](Wire& w) { w.transport = 2; }, "transport");
  differs([](Wire& w) { w.kind = 1; }, "kind");
  differs([](Wire& w) { w.access = 3; }, "access");
  differs([](Wire& w) { w.ptr += 1; }, "ptr");
  differs([](Wire& w) { w.length += 1; }, "length");
  differs([](Wire& w) { w.domains.pop_back(); }, "domain count");
  differs([](Wire& w) { w.domains[1].rkey ^= 1; }, "rkey");
  differs([](Wire& w) { w.domains[2].addr_base += 4096; }, "addr_base");
  differs([](Wire& w) { w.domains[0].address.back() ^= 0x80; }, "address");
  differs([](Wire& w) { w.domains[1].blob.push_back(0); }, "blob");
  differs([](Wire& w) { std::swap(w.domains[0], w.domains[1]); }, "domain order");
}

// identity(): shared by a descriptor's copies (moved ones too), distinct for an equal descriptor
// made or decoded separately; null for the empty one.
TEST(MrDesc, IdentityIsSharedByCopiesOnly) {
  const MrDesc a = create_from(valid_wire(2)).value();
  MrDesc copy = a;
  const MrDesc decoded = MrDesc::from_bytes(a.to_bytes()).value();
  ASSERT_NE(a.identity(), nullptr);
  EXPECT_EQ(copy.identity(), a.identity());
  EXPECT_TRUE(decoded == a);
  EXPECT_NE(decoded.identity(), a.identity());
  EXPECT_NE(create_from(valid_wire(2)).value().identity(), a.identity());
  const MrDesc moved = std::move(copy);
  EXPECT_EQ(moved.identity(), a.identity());
  EXPECT_EQ(MrDesc().identity(), nullptr);
}

// The empty descriptor: no domains, no bytes, and domain(i) is an empty entry.
TEST(MrDesc, EmptyDescriptor) {
  MrDesc d;
  EXPECT_TRUE(d.empty());
  EXPECT_EQ(d.num_domains(), 0u);
  EXPECT_EQ(d.length(), 0u);
  EXPECT_TRUE(d.to_bytes().empty());
  EXPECT_EQ(d.to_hex(), "");
  EXPECT_TRUE(d.domain(0).address.empty());
  // Its (empty) encoding does not decode.
  Result<MrDesc> r = MrDesc::from_bytes(d.to_bytes());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kMalformed);
}

// domain(i) for i >= num_domains() returns an empty entry instead of reading out of bounds.
TEST(MrDesc, DomainOutOfRangeIsEmptyEntry) {
  const MrDesc d = create_from(valid_wire(2)).value();
  ASSERT_EQ(d.num_domains(), 2u);
  EXPECT_FALSE(d.domain(1).address.empty());
  for (size_t i : {size_t{2}, size_t{3}, size_t{16}, std::numeric_limits<size_t>::max()}) {
    const MrDomainEntry& e = d.domain(i);
    EXPECT_TRUE(e.address.empty()) << i;
    EXPECT_EQ(e.rkey, 0u) << i;
    EXPECT_EQ(e.addr_base, 0u) << i;
    EXPECT_TRUE(e.transport_blob.empty()) << i;
  }
}

// ---- create() validation -----------------------------------------------------------------------

// create() enforces the same limits as the decoder: length >= 1, 1..16 domains, non-empty
// addresses, blobs <= 1024 bytes, addr_base + length within 64 bits.
TEST(MrDesc, CreateValidates) {
  auto code_of = [](const Wire& w) { return create_from(w).status().code(); };
  EXPECT_EQ(code_of(valid_wire(1)), ErrorCode::kOk);
  EXPECT_EQ(code_of(valid_wire(16)), ErrorCode::kOk);

  Wire w = valid_wire(1);
  w.length = 0;
  EXPECT_EQ(code_of(w), ErrorCode::kMalformed);

  EXPECT_EQ(code_of(valid_wire(0)), ErrorCode::kMalformed);
  EXPECT_EQ(code_of(valid_wire(17)), ErrorCode::kMalformed);

  w = valid_wire(2);
  w.domains[1].blob.assign(kMaxTransportBlobBytes + 1, 0xab);
  EXPECT_EQ(code_of(w), ErrorCode::kMalformed);
  w.domains[1].blob.assign(kMaxTransportBlobBytes, 0xab);
  EXPECT_EQ(code_of(w), ErrorCode::kOk);

  w = valid_wire(2);
  w.length = 4096;
  w.domains[1].addr_base = std::numeric_limits<uint64_t>::max() - 4095;  // end = 2^64: overflow
  EXPECT_EQ(code_of(w), ErrorCode::kMalformed);
  w.domains[1].addr_base = std::numeric_limits<uint64_t>::max() - 4096;  // end = 2^64 - 1: fine
  EXPECT_EQ(code_of(w), ErrorCode::kOk);

  // An entry with an empty (default) address.
  std::vector<MrDomainEntry> entries = {entry_of(wire_domain(0, 8, 0)), MrDomainEntry{}};
  Result<MrDesc> r =
      MrDesc::create(TransportKind::kLibfabric, MemoryKind::kHost, 0, 4096, Access::kRemoteWrite, entries);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kMalformed);
}

// Whatever create() accepts must encode to bytes that from_bytes() accepts: a descriptor with an
// out-of-range transport, memory kind or access value must be refused at create() time rather
// than produce an encoding every peer rejects.
TEST(MrDesc, CreateRejectsWhatTheDecoderRejects) {
  struct Case {
    const char* what;
    uint8_t transport, kind, access;
  };
  for (const Case& c : {Case{"transport 0", 0, 0, 1}, Case{"transport 3", 3, 0, 1}, Case{"kind 2", 1, 2, 1},
                        Case{"access 4", 1, 0, 4}, Case{"access 0x81", 1, 0, 0x81}}) {
    Wire w = valid_wire(1);
    w.transport = c.transport;
    w.kind = c.kind;
    w.access = c.access;
    Result<MrDesc> created = create_from(w);
    if (created.ok()) {
      Result<MrDesc> decoded = MrDesc::from_bytes(created->to_bytes());
      EXPECT_TRUE(decoded.ok()) << c.what << ": create() accepted a descriptor whose encoding does not decode ("
                                << decoded.status().to_string() << ")";
    } else {
      EXPECT_EQ(created.status().code(), ErrorCode::kMalformed) << c.what;
    }
  }
}

// Sizes for CUDA memory peers write into (memory.h): small allocations as asked, larger ones in
// whole 2 MiB pages, never less than asked.
TEST(PeerWrittenCudaBytes, RoundsOnlyAllocationsLargerThanALargePage) {
  constexpr size_t kPage = kCudaLargePageBytes;
  static_assert(kPage == size_t{2} << 20);
  EXPECT_EQ(peer_written_cuda_bytes(0), 1u);
  EXPECT_EQ(peer_written_cuda_bytes(1), 1u);
  EXPECT_EQ(peer_written_cuda_bytes(4096), 4096u);
  EXPECT_EQ(peer_written_cuda_bytes(kPage), kPage);
  EXPECT_EQ(peer_written_cuda_bytes(kPage + 1), 2 * kPage);
  EXPECT_EQ(peer_written_cuda_bytes(2 * kPage), 2 * kPage);
  EXPECT_EQ(peer_written_cuda_bytes((size_t{2} << 30) + 4096), (size_t{2} << 30) + kPage);
  for (size_t n = kPage + 1; n < 64 * kPage; n += 999'983) {
    const size_t got = peer_written_cuda_bytes(n);
    EXPECT_EQ(got % kPage, 0u) << n;
    EXPECT_GE(got, n);
    EXPECT_LT(got - n, kPage) << n;
  }
}

}  // namespace
}  // namespace fabric_lib

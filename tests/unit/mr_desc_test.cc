// MrDesc: the remote memory descriptor that travels between processes as bytes or hex.
// The wire encoder below is written independently of src/core/mr_desc.cc from the format in
// include/fabric_lib/memory.h, so the tests pin the format, not just self-consistency.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "fabric_lib/memory.h"

namespace fabric_lib {
namespace {

// ---- test-side encoder -------------------------------------------------------------------------

struct WireDomain {
  std::vector<uint8_t> address;
  uint64_t rkey = 0;
  uint64_t addr_base = 0;
  std::vector<uint8_t> blob;
  // Overrides of the length fields (to write lies into the encoding).
  int64_t address_len_field = -1;
  int64_t blob_len_field = -1;
};

struct Wire {
  uint8_t magic[4] = {'F', 'L', 'M', 'D'};
  uint8_t version = 1;
  uint8_t transport = 1;
  uint8_t access = 1;
  uint8_t kind = 0;
  uint64_t ptr = 0x7f0000001000ull;
  uint64_t length = 4096;
  int64_t count_field = -1;  // -1: domains.size()
  std::vector<WireDomain> domains;
};

void put(std::vector<uint8_t>& out, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

std::vector<uint8_t> encode(const Wire& w) {
  std::vector<uint8_t> out(w.magic, w.magic + 4);
  out.push_back(w.version);
  out.push_back(w.transport);
  out.push_back(w.access);
  out.push_back(w.kind);
  put(out, w.ptr, 8);
  put(out, w.length, 8);
  put(out, w.count_field >= 0 ? static_cast<uint64_t>(w.count_field) : w.domains.size(), 2);
  for (const WireDomain& d : w.domains) {
    put(out, d.address_len_field >= 0 ? static_cast<uint64_t>(d.address_len_field) : d.address.size(), 2);
    out.insert(out.end(), d.address.begin(), d.address.end());
    put(out, d.rkey, 8);
    put(out, d.addr_base, 8);
    put(out, d.blob_len_field >= 0 ? static_cast<uint64_t>(d.blob_len_field) : d.blob.size(), 2);
    out.insert(out.end(), d.blob.begin(), d.blob.end());
  }
  return out;
}

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed * 31 + i * 7 + 1);
  return v;
}

WireDomain wire_domain(size_t i, size_t addr_len, size_t blob_len) {
  WireDomain d;
  d.address = pattern(addr_len, static_cast<uint8_t>(i));
  d.rkey = 0x1122334455667700ull + i;
  d.addr_base = (i % 2 == 0) ? 0 : 0x7f0000000000ull + i * 0x1000;
  d.blob = pattern(blob_len, static_cast<uint8_t>(i + 100));
  return d;
}

// A valid wire descriptor with `n` domains of varied address and blob lengths.
Wire valid_wire(size_t n, bool with_blobs = true) {
  Wire w;
  for (size_t i = 0; i < n; ++i) {
    const size_t addr_len = 1 + (i * 37) % 256;  // 1 .. 256
    const size_t blob_len = with_blobs ? (i * 67) % 300 : 0;
    w.domains.push_back(wire_domain(i, addr_len, blob_len));
  }
  return w;
}

MrDomainEntry entry_of(const WireDomain& d) {
  MrDomainEntry e;
  e.address = DomainAddress::from_bytes(d.address).value();
  e.rkey = d.rkey;
  e.addr_base = d.addr_base;
  e.transport_blob = d.blob;
  return e;
}

Result<MrDesc> create_from(const Wire& w) {
  std::vector<MrDomainEntry> entries;
  for (const WireDomain& d : w.domains) entries.push_back(entry_of(d));
  return MrDesc::create(static_cast<TransportKind>(w.transport), static_cast<MemoryKind>(w.kind), w.ptr, w.length,
                        static_cast<Access>(w.access), std::move(entries));
}

void expect_malformed(const std::vector<uint8_t>& bytes, const std::string& what) {
  Result<MrDesc> r = MrDesc::from_bytes(bytes);
  ASSERT_FALSE(r.ok()) << what;
  EXPECT_EQ(r.status().code(), ErrorCode::kMalformed) << what << ": " << r.status().to_string();
  EXPECT_FALSE(r.status().message().empty()) << what;
}

void expect_fields(const MrDesc& d, const Wire& w) {
  ASSERT_FALSE(d.empty());
  EXPECT_EQ(static_cast<uint8_t>(d.transport()), w.transport);
  EXPECT_EQ(static_cast<uint8_t>(d.memory_kind()), w.kind);
  EXPECT_EQ(static_cast<uint8_t>(d.access()), w.access);
  EXPECT_EQ(d.ptr(), w.ptr);
  EXPECT_EQ(d.length(), w.length);
  ASSERT_EQ(d.num_domains(), w.domains.size());
  for (size_t i = 0; i < w.domains.size(); ++i) {
    EXPECT_EQ(d.domain(i).address.bytes(), w.domains[i].address) << i;
    EXPECT_EQ(d.domain(i).rkey, w.domains[i].rkey) << i;
    EXPECT_EQ(d.domain(i).addr_base, w.domains[i].addr_base) << i;
    EXPECT_EQ(d.domain(i).transport_blob, w.domains[i].blob) << i;
  }
}

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

// ---- decoder rejection -------------------------------------------------------------------------

// Every proper prefix of a valid encoding (1 and 16 domains, with blobs) is rejected.
TEST(MrDesc, RejectsEveryTruncation) {
  for (size_t n : {size_t{1}, size_t{16}}) {
    const std::vector<uint8_t> bytes = encode(valid_wire(n));
    ASSERT_TRUE(MrDesc::from_bytes(bytes).ok());
    for (size_t len = 0; len < bytes.size(); ++len) {
      Result<MrDesc> r = MrDesc::from_bytes(std::span<const uint8_t>(bytes.data(), len));
      ASSERT_FALSE(r.ok()) << "n=" << n << " prefix " << len << " of " << bytes.size();
      ASSERT_EQ(r.status().code(), ErrorCode::kMalformed) << "n=" << n << " prefix " << len;
    }
    // The same through hex (every even-length prefix).
    const std::string hex = to_hex(bytes);
    for (size_t len = 0; len < hex.size(); len += 2) {
      Result<MrDesc> r = MrDesc::from_hex(std::string_view(hex).substr(0, len));
      ASSERT_FALSE(r.ok()) << "hex prefix " << len;
      ASSERT_EQ(r.status().code(), ErrorCode::kMalformed);
    }
  }
}

// Bytes after a complete descriptor are rejected (one extra byte, and many).
TEST(MrDesc, RejectsTrailingBytes) {
  for (size_t n : {size_t{1}, size_t{16}}) {
    std::vector<uint8_t> bytes = encode(valid_wire(n));
    bytes.push_back(0);
    expect_malformed(bytes, "one trailing zero byte");
    bytes.back() = 0xff;
    expect_malformed(bytes, "one trailing 0xff byte");
    bytes.insert(bytes.end(), 100, 0x5a);
    expect_malformed(bytes, "101 trailing bytes");
    // A second full copy appended.
    std::vector<uint8_t> twice = encode(valid_wire(n));
    const std::vector<uint8_t> once = twice;
    twice.insert(twice.end(), once.begin(), once.end());
    expect_malformed(twice, "two descriptors back to back");
  }
}

// Every header field with a value outside its domain is rejected.
TEST(MrDesc, RejectsBadHeaderFields) {
  for (int i = 0; i < 4; ++i) {
    Wire w = valid_wire(1);
    w.magic[i] ^= 0x20;  // "FLMD" -> e.g. "fLMD"
    expect_malformed(encode(w), "magic byte " + std::to_string(i));
  }
  for (uint8_t v : {uint8_t{0}, uint8_t{2}, uint8_t{255}}) {
    Wire w = valid_wire(1);
    w.version = v;
    expect_malformed(encode(w), "version " + std::to_string(v));
  }
  for (uint8_t t : {uint8_t{0}, uint8_t{3}, uint8_t{128}, uint8_t{255}}) {
    Wire w = valid_wire(1);
    w.transport = t;
    expect_malformed(encode(w), "transport " + std::to_string(t));
  }
  for (uint8_t a : {uint8_t{4}, uint8_t{5}, uint8_t{8}, uint8_t{0x80}, uint8_t{0xff}}) {
    Wire w = valid_wire(1);
    w.access = a;
    expect_malformed(encode(w), "access " + std::to_string(a));
  }
  for (uint8_t k : {uint8_t{2}, uint8_t{3}, uint8_t{255}}) {
    Wire w = valid_wire(1);
    w.kind = k;
    expect_malformed(encode(w), "memory kind " + std::to_string(k));
  }
  // Every legal value of those fields decodes.
  for (uint8_t t : {uint8_t{1}, uint8_t{2}}) {
    for (uint8_t a = 0; a < 4; ++a) {
      for (uint8_t k = 0; k < 2; ++k) {
        Wire w = valid_wire(1);
        w.transport = t;
        w.access = a;
        w.kind = k;
        Result<MrDesc> r = MrDesc::from_bytes(encode(w));
        ASSERT_TRUE(r.ok()) << int{t} << "/" << int{a} << "/" << int{k} << ": " << r.status().to_string();
        expect_fields(*r, w);
      }
    }
  }
}

// Domain counts 0 and 17 (and 65535) are rejected, whatever follows; 16 is the maximum accepted.
TEST(MrDesc, RejectsBadDomainCount) {
  Wire w = valid_wire(0);
  expect_malformed(encode(w), "0 domains");
  w = valid_wire(1);
  w.count_field = 0;  // says 0 but one entry follows
  expect_malformed(encode(w), "count 0 with an entry after it");
  w = valid_wire(17);  // 17 well-formed entries
  expect_malformed(encode(w), "17 domains");
  w = valid_wire(16);
  w.count_field = 17;  // claims one more than present
  expect_malformed(encode(w), "count 17, 16 entries");
  w = valid_wire(1);
  w.count_field = 65535;
  expect_malformed(encode(w), "count 65535");
  w = valid_wire(2);
  w.count_field = 1;  // fewer than present: leftover bytes
  expect_malformed(encode(w), "count 1, 2 entries");
  EXPECT_TRUE(MrDesc::from_bytes(encode(valid_wire(16))).ok());
}

// Address lengths 0 and 257 (and 65535) are rejected; 1 and 256 are accepted.
TEST(MrDesc, RejectsBadAddressLength) {
  for (size_t which : {size_t{0}, size_t{2}}) {  // first and a later domain
    Wire w = valid_wire(3);
    w.domains[which].address.clear();
    expect_malformed(encode(w), "address of 0 bytes");

    w = valid_wire(3);
    w.domains[which].address = pattern(257, 9);
    expect_malformed(encode(w), "address of 257 bytes");

    w = valid_wire(3);
    w.domains[which].address_len_field = 65535;
    expect_malformed(encode(w), "address length 65535");

    for (size_t ok_len : {size_t{1}, size_t{256}}) {
      w = valid_wire(3);
      w.domains[which].address = pattern(ok_len, 3);
      Result<MrDesc> r = MrDesc::from_bytes(encode(w));
      ASSERT_TRUE(r.ok()) << ok_len << ": " << r.status().to_string();
      expect_fields(*r, w);
    }
  }
}

// Transport blobs of 1025 bytes (and a lying length field) are rejected; 1024 is accepted.
TEST(MrDesc, RejectsBadBlobLength) {
  Wire w = valid_wire(2);
  w.domains[1].blob = pattern(kMaxTransportBlobBytes + 1, 4);
  expect_malformed(encode(w), "blob of 1025 bytes");
  w = valid_wire(2);
  w.domains[0].blob_len_field = 65535;
  expect_malformed(encode(w), "blob length 65535");
  w = valid_wire(2);
  w.domains[0].blob = pattern(10, 1);
  w.domains[0].blob_len_field = 11;  // claims one more byte than the blob has
  expect_malformed(encode(w), "blob length one too long");
  w = valid_wire(2);
  w.domains[1].blob = pattern(kMaxTransportBlobBytes, 4);
  Result<MrDesc> r = MrDesc::from_bytes(encode(w));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_fields(*r, w);
}

// A region whose remote end (addr_base + length) passes 2^64, and a length of 0, are rejected.
TEST(MrDesc, RejectsOverflowAndZeroLength) {
  Wire w = valid_wire(2);
  w.length = 0;
  expect_malformed(encode(w), "length 0");

  w = valid_wire(2);
  w.length = 2;
  w.domains[1].addr_base = std::numeric_limits<uint64_t>::max();
  expect_malformed(encode(w), "addr_base 2^64-1 + length 2");

  w = valid_wire(2);
  w.length = std::numeric_limits<uint64_t>::max();
  w.domains[0].addr_base = 1;
  expect_malformed(encode(w), "addr_base 1 + length 2^64-1");

  w = valid_wire(2);
  w.length = std::numeric_limits<uint64_t>::max();
  w.domains[0].addr_base = 0;
  w.domains[1].addr_base = 0;
  EXPECT_TRUE(MrDesc::from_bytes(encode(w)).ok()) << "addr_base 0 + length 2^64-1 is representable";
}

// from_hex() rejects odd lengths and non-hex characters with kMalformed.
TEST(MrDesc, FromHexRejectsBadHex) {
  const std::string hex = create_from(valid_wire(2)).value().to_hex();
  for (const std::string& bad : {hex + "0", hex.substr(1), std::string("z") + hex.substr(1),
                                 hex.substr(0, 10) + "g" + hex.substr(11), hex.substr(0, 20) + " " + hex.substr(21),
                                 std::string("0x") + hex.substr(2), std::string()}) {
    Result<MrDesc> r = MrDesc::from_hex(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), ErrorCode::kMalformed) << bad;
  }
}

// ---- garbage ---------------------------------------------------------------------------------

// Decoding either fails with kMalformed or yields a descriptor that re-encodes to the exact input.
void check_garbage(const std::vector<uint8_t>& bytes, size_t& decoded_ok) {
  Result<MrDesc> r = MrDesc::from_bytes(bytes);
  if (!r.ok()) {
    ASSERT_EQ(r.status().code(), ErrorCode::kMalformed) << r.status().to_string();
    return;
  }
  ++decoded_ok;
  ASSERT_EQ(r->to_bytes(), bytes);
  ASSERT_GE(r->num_domains(), 1u);
  ASSERT_LE(r->num_domains(), kMaxDomainsPerGroup);
  ASSERT_GE(r->length(), 1u);
}

// 20000 random buffers (some with a valid header prefix so decoding gets deep) never crash and
// never decode into something that does not re-encode identically.
TEST(MrDesc, RandomGarbageNeverCrashes) {
  std::mt19937 rng(12345);
  std::uniform_int_distribution<int> byte(0, 255);
  size_t decoded_ok = 0;
  const std::vector<uint8_t> header = encode(valid_wire(1));
  for (int iter = 0; iter < 20000; ++iter) {
    const size_t len = std::uniform_int_distribution<size_t>(0, 400)(rng);
    std::vector<uint8_t> buf(len);
    for (uint8_t& b : buf) b = static_cast<uint8_t>(byte(rng));
    if (iter % 2 == 1) {
      // Keep a valid magic/version/transport/access/kind and a small domain count, so the
      // per-domain decoding runs on random lengths.
      const size_t keep = std::min<size_t>(len, 8 + (iter % 4 == 1 ? 16 : 0));
      std::copy(header.begin(), header.begin() + keep, buf.begin());
      if (len >= 26) {
        buf[24] = static_cast<uint8_t>(1 + iter % 3);
        buf[25] = 0;
      }
    }
    check_garbage(buf, decoded_ok);
    if (HasFatalFailure()) return;
  }
  // Random bytes essentially never form a descriptor.
  EXPECT_LT(decoded_ok, 20u);
}

// 20000 single-byte mutations of valid 1- and 3-domain encodings never crash; a mutation either
// fails with kMalformed or decodes to a descriptor that re-encodes to the mutated bytes.
TEST(MrDesc, RandomMutationsOfValidEncoding) {
  std::mt19937 rng(777);
  size_t decoded_ok = 0;
  for (size_t n : {size_t{1}, size_t{3}}) {
    const std::vector<uint8_t> valid = encode(valid_wire(n));
    for (int iter = 0; iter < 10000; ++iter) {
      std::vector<uint8_t> buf = valid;
      const size_t pos = std::uniform_int_distribution<size_t>(0, buf.size() - 1)(rng);
      const uint8_t val = static_cast<uint8_t>(std::uniform_int_distribution<int>(0, 255)(rng));
      buf[pos] = val;
      check_garbage(buf, decoded_ok);
      if (HasFatalFailure()) return;
    }
  }
  // Mutations of ptr, rkeys, address/blob contents etc. stay valid: many do decode.
  EXPECT_GT(decoded_ok, 1000u);
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

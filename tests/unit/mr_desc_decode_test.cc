// MrDesc's decoder refuses what the wire format does not allow: truncations, trailing bytes, bad
// header fields, counts and lengths, overflows, bad hex, random garbage and mutations — always
// with kMalformed, never a crash.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "fabric_lib/memory.h"
#include "support/mr_desc_wire.h"

namespace fabric_lib {
namespace {

using namespace testing::mr_wire;

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

}  // namespace
}  // namespace fabric_lib

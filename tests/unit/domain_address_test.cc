// DomainAddress and the free to_hex()/from_hex() helpers.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <unordered_set>
#include <vector>

#include "fabric_lib/domain_address.h"

namespace fabric_lib {
namespace {

std::vector<uint8_t> random_bytes(std::mt19937& rng, size_t n) {
  std::vector<uint8_t> v(n);
  for (uint8_t& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// to_hex() writes two lower-case digits per byte, high nibble first; from_hex() inverts it.
TEST(Hex, KnownValues) {
  const std::vector<uint8_t> bytes = {0x00, 0x01, 0x0f, 0x10, 0x7f, 0x80, 0xab, 0xcd, 0xef, 0xff};
  EXPECT_EQ(to_hex(bytes), "00010f107f80abcdefff");
  Result<std::vector<uint8_t>> back = from_hex("00010f107f80abcdefff");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, bytes);
  Result<std::vector<uint8_t>> upper = from_hex("00010F107F80ABCDEFFF");
  ASSERT_TRUE(upper.ok());
  EXPECT_EQ(*upper, bytes);
  // The free helpers accept the empty string (it is the hex of zero bytes).
  EXPECT_EQ(to_hex(std::vector<uint8_t>{}), "");
  Result<std::vector<uint8_t>> empty = from_hex("");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

// Every byte value survives to_hex()/from_hex().
TEST(Hex, AllByteValuesRoundTrip) {
  std::vector<uint8_t> all(256);
  for (int i = 0; i < 256; ++i) all[i] = static_cast<uint8_t>(i);
  const std::string hex = to_hex(all);
  ASSERT_EQ(hex.size(), 512u);
  Result<std::vector<uint8_t>> back = from_hex(hex);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, all);
}

// Odd lengths and any non-hex character (in either nibble, anywhere) give kMalformed.
TEST(Hex, RejectsOddLengthAndNonHex) {
  for (const std::string& bad : {std::string("0"), std::string("abc"), std::string("00112")}) {
    Result<std::vector<uint8_t>> r = from_hex(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), ErrorCode::kMalformed) << bad;
  }
  const std::string good = "0123456789abcdef";
  for (char c : std::string("gGxz /:@`{-+\x7f") + std::string(1, '\0') + "\xff") {
    for (size_t pos = 0; pos < good.size(); ++pos) {
      std::string bad = good;
      bad[pos] = c;
      Result<std::vector<uint8_t>> r = from_hex(bad);
      ASSERT_FALSE(r.ok()) << "char " << int{static_cast<unsigned char>(c)} << " at " << pos;
      EXPECT_EQ(r.status().code(), ErrorCode::kMalformed);
    }
  }
}

// DomainAddress round-trips through bytes and hex at lengths 1..256.
TEST(DomainAddress, RoundTrip) {
  std::mt19937 rng(42);
  for (size_t n : {size_t{1}, size_t{2}, size_t{16}, size_t{28}, size_t{64}, size_t{255}, size_t{256}}) {
    const std::vector<uint8_t> bytes = random_bytes(rng, n);
    Result<DomainAddress> a = DomainAddress::from_bytes(bytes);
    ASSERT_TRUE(a.ok()) << n;
    EXPECT_FALSE(a->empty());
    EXPECT_EQ(a->bytes(), bytes);
    EXPECT_EQ(a->to_bytes(), bytes);
    const std::string hex = a->to_hex();
    EXPECT_EQ(hex, to_hex(bytes));
    Result<DomainAddress> b = DomainAddress::from_hex(hex);
    ASSERT_TRUE(b.ok()) << n;
    EXPECT_TRUE(*a == *b);
    EXPECT_EQ(b->bytes(), bytes);
  }
}

// Empty and over-long (257+) addresses are rejected with kMalformed, as bytes and as hex.
TEST(DomainAddress, RejectsBadLengths) {
  Result<DomainAddress> empty = DomainAddress::from_bytes({});
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().code(), ErrorCode::kMalformed);
  Result<DomainAddress> empty_hex = DomainAddress::from_hex("");
  ASSERT_FALSE(empty_hex.ok());
  EXPECT_EQ(empty_hex.status().code(), ErrorCode::kMalformed);

  for (size_t n : {kMaxDomainAddressBytes + 1, size_t{1000}}) {
    const std::vector<uint8_t> big(n, 0x42);
    Result<DomainAddress> r = DomainAddress::from_bytes(big);
    ASSERT_FALSE(r.ok()) << n;
    EXPECT_EQ(r.status().code(), ErrorCode::kMalformed);
    Result<DomainAddress> h = DomainAddress::from_hex(to_hex(big));
    ASSERT_FALSE(h.ok()) << n;
    EXPECT_EQ(h.status().code(), ErrorCode::kMalformed);
  }
}

// DomainAddress::from_hex() rejects odd lengths and non-hex characters with kMalformed.
TEST(DomainAddress, FromHexRejectsBadHex) {
  for (const std::string& bad : {std::string("abc"), std::string("0g"), std::string("zz"), std::string("0x12")}) {
    Result<DomainAddress> r = DomainAddress::from_hex(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), ErrorCode::kMalformed) << bad;
  }
}

// Equality is by bytes; equal addresses hash equally; distinct ones (practically) hash apart.
TEST(DomainAddress, HashAndEqualityAgree) {
  std::mt19937 rng(7);
  std::vector<DomainAddress> addrs;
  std::unordered_set<std::string> distinct_bytes;
  for (int i = 0; i < 2000; ++i) {
    std::vector<uint8_t> b = random_bytes(rng, 1 + i % 40);
    distinct_bytes.insert(std::string(b.begin(), b.end()));
    addrs.push_back(DomainAddress::from_bytes(b).value());
  }
  const std::hash<DomainAddress> h;
  std::unordered_set<size_t> hashes;
  for (const DomainAddress& a : addrs) {
    const DomainAddress copy = DomainAddress::from_bytes(a.bytes()).value();
    EXPECT_TRUE(a == copy);
    EXPECT_EQ(h(a), h(copy));
    hashes.insert(h(a));
  }
  std::unordered_set<DomainAddress> set(addrs.begin(), addrs.end());
  EXPECT_EQ(set.size(), distinct_bytes.size());
  EXPECT_GE(hashes.size(), distinct_bytes.size() - 2);  // FNV-1a: collisions are rare

  // Prefixes and single-bit changes are different addresses.
  const DomainAddress a = DomainAddress::from_bytes(std::vector<uint8_t>{1, 2, 3, 4}).value();
  const DomainAddress prefix = DomainAddress::from_bytes(std::vector<uint8_t>{1, 2, 3}).value();
  const DomainAddress flipped = DomainAddress::from_bytes(std::vector<uint8_t>{1, 2, 3, 5}).value();
  EXPECT_FALSE(a == prefix);
  EXPECT_FALSE(a == flipped);
  EXPECT_NE(h(a), h(prefix));
  EXPECT_NE(h(a), h(flipped));
  EXPECT_TRUE(DomainAddress() == DomainAddress());
  EXPECT_FALSE(DomainAddress() == a);
  EXPECT_EQ(h(DomainAddress()), h(DomainAddress()));
}

}  // namespace
}  // namespace fabric_lib

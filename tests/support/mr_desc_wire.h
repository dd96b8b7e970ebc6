// The MrDesc tests' own wire encoder (mr_desc_test.cc, mr_desc_decode_test.cc): written
// independently of src/base/mr_desc.cc from the format in include/fabric_lib/memory.h, so the
// tests pin the format, not just self-consistency.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "fabric_lib/memory.h"

namespace fabric_lib::testing::mr_wire {

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

inline void put(std::vector<uint8_t>& out, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

inline std::vector<uint8_t> encode(const Wire& w) {
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

inline std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed * 31 + i * 7 + 1);
  return v;
}

inline WireDomain wire_domain(size_t i, size_t addr_len, size_t blob_len) {
  WireDomain d;
  d.address = pattern(addr_len, static_cast<uint8_t>(i));
  d.rkey = 0x1122334455667700ull + i;
  d.addr_base = (i % 2 == 0) ? 0 : 0x7f0000000000ull + i * 0x1000;
  d.blob = pattern(blob_len, static_cast<uint8_t>(i + 100));
  return d;
}

// A valid wire descriptor with `n` domains of varied address and blob lengths.
inline Wire valid_wire(size_t n, bool with_blobs = true) {
  Wire w;
  for (size_t i = 0; i < n; ++i) {
    const size_t addr_len = 1 + (i * 37) % 256;  // 1 .. 256
    const size_t blob_len = with_blobs ? (i * 67) % 300 : 0;
    w.domains.push_back(wire_domain(i, addr_len, blob_len));
  }
  return w;
}

inline MrDomainEntry entry_of(const WireDomain& d) {
  MrDomainEntry e;
  e.address = DomainAddress::from_bytes(d.address).value();
  e.rkey = d.rkey;
  e.addr_base = d.addr_base;
  e.transport_blob = d.blob;
  return e;
}

inline Result<MrDesc> create_from(const Wire& w) {
  std::vector<MrDomainEntry> entries;
  for (const WireDomain& d : w.domains) entries.push_back(entry_of(d));
  return MrDesc::create(static_cast<TransportKind>(w.transport), static_cast<MemoryKind>(w.kind), w.ptr, w.length,
                        static_cast<Access>(w.access), std::move(entries));
}

inline void expect_malformed(const std::vector<uint8_t>& bytes, const std::string& what) {
  Result<MrDesc> r = MrDesc::from_bytes(bytes);
  ASSERT_FALSE(r.ok()) << what;
  EXPECT_EQ(r.status().code(), ErrorCode::kMalformed) << what << ": " << r.status().to_string();
  EXPECT_FALSE(r.status().message().empty()) << what;
}

inline void expect_fields(const MrDesc& d, const Wire& w) {
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

}  // namespace fabric_lib::testing::mr_wire

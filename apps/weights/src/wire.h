// The weights app's message encoding (internal): the public little-endian writer and
// bounds-checked reader (fabric_lib/byte_codec.h) plus the app's length-prefixed blobs and
// strings and counts checked against the bytes left, so a decoder never allocates more than the
// input justifies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "fabric_lib/byte_codec.h"

namespace fabric_lib::weights::wire {

class Writer : public codec::ByteWriter {
 public:
  void blob(std::span<const uint8_t> b) {  // u32 length, then the bytes
    u32(static_cast<uint32_t>(b.size()));
    bytes(b);
  }
  void str(const std::string& s) {  // u16 length, then the characters
    u16(static_cast<uint16_t>(s.size()));
    bytes({reinterpret_cast<const uint8_t*>(s.data()), s.size()});
  }
};

class Reader : public codec::ByteReader {
 public:
  using codec::ByteReader::ByteReader;
  bool blob(std::span<const uint8_t>& v, size_t max_len) {
    uint32_t n;
    return u32(n) && n <= max_len && bytes(n, v);
  }
  bool str(std::string& s, size_t max_len) {
    uint16_t n;
    std::span<const uint8_t> v;
    if (!u16(n) || n > max_len || !bytes(n, v)) return false;
    s.assign(reinterpret_cast<const char*>(v.data()), v.size());
    return true;
  }
  // A count of items each at least `min_item_bytes` long: rejects counts the rest cannot hold.
  bool count(uint32_t& n, size_t min_item_bytes, size_t max_count) {
    if (!u32(n) || n > max_count) return false;
    return static_cast<uint64_t>(n) * min_item_bytes <= remaining();
  }
  bool done() const { return at_end(); }
};

}  // namespace fabric_lib::weights::wire

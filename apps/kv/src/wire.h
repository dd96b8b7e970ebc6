// The KV control messages' encoding (internal): the public little-endian writer and
// bounds-checked reader (fabric_lib/byte_codec.h) plus u16-length strings, and a reader that
// keeps the name of the first field that failed, for the error message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "fabric_lib/byte_codec.h"

namespace fabric_lib::kv::wire {

class Writer : public codec::ByteWriter {
 public:
  void str(const std::string& s) {  // u16 length, then the characters
    u16(static_cast<uint16_t>(s.size()));
    bytes({reinterpret_cast<const uint8_t*>(s.data()), s.size()});
  }
};

// Every read fails (returns false) once the input is exhausted; the first failing field's name
// is kept for the error message.
class Reader {
 public:
  explicit Reader(std::span<const uint8_t> in) : in_(in) {}
  bool u8(uint8_t& v, const char* what) { return in_.u8(v) || fail(what); }
  bool u16(uint16_t& v, const char* what) { return in_.u16(v) || fail(what); }
  bool u32(uint32_t& v, const char* what) { return in_.u32(v) || fail(what); }
  bool u64(uint64_t& v, const char* what) { return in_.u64(v) || fail(what); }
  bool bytes(size_t n, std::span<const uint8_t>& out, const char* what) { return in_.bytes(n, out) || fail(what); }
  // A u16-length string of 1..max bytes (0..max when allow_empty).
  bool str(std::string& s, size_t max, const char* what, bool allow_empty = false) {
    uint16_t n = 0;
    if (!u16(n, what)) return false;
    if (n > max || (n == 0 && !allow_empty)) return fail(what);
    std::span<const uint8_t> b;
    if (!bytes(n, b, what)) return false;
    s.assign(reinterpret_cast<const char*>(b.data()), b.size());
    return true;
  }
  bool fail(const char* what) {
    if (error_.empty()) error_ = what;
    return false;
  }
  bool at_end() const { return in_.at_end(); }
  size_t remaining() const { return in_.remaining(); }
  const std::string& error() const { return error_; }

 private:
  codec::ByteReader in_;
  std::string error_;
};

}  // namespace fabric_lib::kv::wire

// Little-endian byte writer and bounds-checked reader: what the engine's wire formats (MrDesc,
// DomainAddress, probe messages) are written with, public so that applications framing their own
// control messages over submit_send / post_recvs (apps/moe's RankInfo and route blocks) use the
// same code. The reader never reads past its span; every failure is a `false`, never a throw.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

namespace fabric_lib::codec {

class ByteWriter {
 public:
  void u8(uint8_t v) { out_.push_back(v); }
  void u16(uint16_t v) { put(v, 2); }
  void u32(uint32_t v) { put(v, 4); }
  void u64(uint64_t v) { put(v, 8); }
  void bytes(std::span<const uint8_t> b) { out_.insert(out_.end(), b.begin(), b.end()); }
  std::vector<uint8_t> take() { return std::move(out_); }
  // The bytes written so far, to patch a length in place or append in bulk.
  std::vector<uint8_t>& out() { return out_; }

 private:
  void put(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  std::vector<uint8_t> out_;
};

class ByteReader {
 public:
  explicit ByteReader(std::span<const uint8_t> in) : in_(in) {}

  bool u8(uint8_t& v) { return get(v, 1); }
  bool u16(uint16_t& v) { return get(v, 2); }
  bool u32(uint32_t& v) { return get(v, 4); }
  bool u64(uint64_t& v) { return get(v, 8); }
  // The next n bytes, copied into v / as a view into the reader's span (valid while it is).
  bool bytes(size_t n, std::vector<uint8_t>& v) {
    if (remaining() < n) return false;
    v.assign(in_.begin() + pos_, in_.begin() + pos_ + n);
    pos_ += n;
    return true;
  }
  bool bytes(size_t n, std::span<const uint8_t>& view) {
    if (remaining() < n) return false;
    view = in_.subspan(pos_, n);
    pos_ += n;
    return true;
  }
  size_t remaining() const { return in_.size() - pos_; }
  bool at_end() const { return pos_ == in_.size(); }

 private:
  template <typename T>
  bool get(T& v, size_t n) {
    if (remaining() < n) return false;
    uint64_t x = 0;
    for (size_t i = 0; i < n; ++i) x |= static_cast<uint64_t>(in_[pos_ + i]) << (8 * i);
    v = static_cast<T>(x);
    pos_ += n;
    return true;
  }
  std::span<const uint8_t> in_;
  size_t pos_ = 0;
};

}  // namespace fabric_lib::codec

// Little-endian writer and bounds-checked reader for the weights app's messages (internal).
// The reader never reads past its span and never allocates more than the bytes left justify.
#pragma once

#include <cstddef>
#include <cstdint>
#include <bit>
#include <cstring>
#include <span>
#include <string>
#include <vector>

namespace fabric_lib::weights::wire {

class Writer {
 public:
  void u8(uint8_t v) { out_.push_back(v); }
  void u16(uint16_t v) { put(v, 2); }
  void u32(uint32_t v) { put(v, 4); }
  void u64(uint64_t v) { put(v, 8); }
  void bytes(std::span<const uint8_t> b) { out_.insert(out_.end(), b.begin(), b.end()); }
  void blob(std::span<const uint8_t> b) {
    u32(static_cast<uint32_t>(b.size()));
    bytes(b);
  }
  void str(const std::string& s) {
    u16(static_cast<uint16_t>(s.size()));
    out_.insert(out_.end(), s.begin(), s.end());
  }
  std::vector<uint8_t>& out() { return out_; }
  std::vector<uint8_t> take() { return std::move(out_); }

 private:
  void put(uint64_t v, int n) {
    static_assert(std::endian::native == std::endian::little, "the wire format is little endian");
    const size_t at = out_.size();
    out_.resize(at + n);
    std::memcpy(out_.data() + at, &v, n);
  }
  std::vector<uint8_t> out_;
};

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> in) : in_(in) {}
  bool u8(uint8_t& v) { return get(v, 1); }
  bool u16(uint16_t& v) { return get(v, 2); }
  bool u32(uint32_t& v) { return get(v, 4); }
  bool u64(uint64_t& v) { return get(v, 8); }
  bool blob(std::span<const uint8_t>& v, size_t max_len) {
    uint32_t n;
    if (!u32(n) || n > max_len || n > remaining()) return false;
    v = in_.subspan(pos_, n);
    pos_ += n;
    return true;
  }
  bool str(std::string& s, size_t max_len) {
    uint16_t n;
    if (!u16(n) || n > max_len || n > remaining()) return false;
    s.assign(reinterpret_cast<const char*>(in_.data() + pos_), n);
    pos_ += n;
    return true;
  }
  // A count of items each at least `min_item_bytes` long: rejects counts the rest cannot hold.
  bool count(uint32_t& n, size_t min_item_bytes, size_t max_count) {
    if (!u32(n) || n > max_count) return false;
    return static_cast<uint64_t>(n) * min_item_bytes <= remaining();
  }
  size_t remaining() const { return in_.size() - pos_; }
  bool done() const { return pos_ == in_.size(); }

 private:
  template <typename T>
  bool get(T& v, int n) {
    if (remaining() < static_cast<size_t>(n)) return false;
    uint64_t x = 0;
    for (int i = 0; i < n; ++i) x |= static_cast<uint64_t>(in_[pos_ + i]) << (8 * i);
    v = static_cast<T>(x);
    pos_ += n;
    return true;
  }
  std::span<const uint8_t> in_;
  size_t pos_ = 0;
};

}  // namespace fabric_lib::weights::wire

// Little-endian writer and bounds-checked reader for the KV control messages.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

namespace fabric_lib::kv::wire {

class Writer {
 public:
  void u8(uint8_t v) { out_.push_back(v); }
  void u16(uint16_t v) { put(v, 2); }
  void u32(uint32_t v) { put(v, 4); }
  void u64(uint64_t v) { put(v, 8); }
  void bytes(std::span<const uint8_t> b) { out_.insert(out_.end(), b.begin(), b.end()); }
  void str(const std::string& s) {
    u16(static_cast<uint16_t>(s.size()));
    out_.insert(out_.end(), s.begin(), s.end());
  }
  std::vector<uint8_t> take() { return std::move(out_); }

 private:
  void put(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  std::vector<uint8_t> out_;
};

// Every read fails (returns false) once the input is exhausted; the first failing field's name
// is kept for the error message.
class Reader {
 public:
  explicit Reader(std::span<const uint8_t> in) : in_(in) {}
  bool u8(uint8_t& v, const char* what) { return get(v, 1, what); }
  bool u16(uint16_t& v, const char* what) { return get(v, 2, what); }
  bool u32(uint32_t& v, const char* what) { return get(v, 4, what); }
  bool u64(uint64_t& v, const char* what) { return get(v, 8, what); }
  bool bytes(size_t n, std::span<const uint8_t>& out, const char* what) {
    if (in_.size() - pos_ < n) return fail(what);
    out = in_.subspan(pos_, n);
    pos_ += n;
    return true;
  }
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
  bool at_end() const { return pos_ == in_.size(); }
  size_t remaining() const { return in_.size() - pos_; }
  const std::string& error() const { return error_; }

 private:
  template <typename T>
  bool get(T& v, int n, const char* what) {
    if (in_.size() - pos_ < size_t(n)) return fail(what);
    uint64_t x = 0;
    for (int i = 0; i < n; ++i) x |= uint64_t(in_[pos_ + i]) << (8 * i);
    v = static_cast<T>(x);
    pos_ += n;
    return true;
  }
  std::span<const uint8_t> in_;
  size_t pos_ = 0;
  std::string error_;
};

}  // namespace fabric_lib::kv::wire

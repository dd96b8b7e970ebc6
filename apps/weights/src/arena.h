// First-fit allocator over the trainer's prepared-buffer arena (internal). Tasks free their
// buffers in any order (their writes complete out of order); adjacent free ranges merge.
#pragma once

#include <cstdint>
#include <map>
#include <optional>

namespace fabric_lib::weights::detail {

class Arena {
 public:
  explicit Arena(uint64_t size) : size_(size) {
    if (size) free_[0] = size;
  }
  // Offset of `n` bytes (64-byte aligned), or nullopt when no free range is large enough.
  std::optional<uint64_t> allocate(uint64_t n) {
    n = (n + 63) & ~uint64_t{63};
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < n) continue;
      const uint64_t off = it->first, len = it->second;
      free_.erase(it);
      if (len > n) free_[off + n] = len - n;
      used_ += n;
      return off;
    }
    return std::nullopt;
  }
  void release(uint64_t off, uint64_t n) {
    n = (n + 63) & ~uint64_t{63};
    used_ -= n;
    auto next = free_.lower_bound(off);
    if (next != free_.end() && next->first == off + n) {
      n += next->second;
      next = free_.erase(next);
    }
    if (next != free_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == off) {
        prev->second += n;
        return;
      }
    }
    free_[off] = n;
  }
  uint64_t used() const { return used_; }
  uint64_t size() const { return size_; }

 private:
  uint64_t size_;
  uint64_t used_ = 0;
  std::map<uint64_t, uint64_t> free_;  // offset -> length
};

}  // namespace fabric_lib::weights::detail

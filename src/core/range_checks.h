// Range arithmetic shared by the submit paths: overflow-free containment tests and their messages.
#pragma once

#include <cstdint>
#include <string>

namespace fabric_lib::detail {

// offset + length <= size, without overflow.
inline bool fits(uint64_t offset, uint64_t length, uint64_t size) { return offset <= size && length <= size - offset; }

inline std::string range_text(uint64_t offset, uint64_t length, uint64_t size) {
  return "[" + std::to_string(offset) + ", +" + std::to_string(length) + ") of a " + std::to_string(size) +
         "-byte region";
}

// Pages at indices up to `max_index` end inside `size`: offset + max_index * stride + page <= size.
inline bool pages_fit(uint64_t offset, uint64_t max_index, uint64_t stride, uint64_t page, uint64_t size) {
  const unsigned __int128 end = static_cast<unsigned __int128>(max_index) * stride + offset + page;
  return end <= size;
}

}  // namespace fabric_lib::detail

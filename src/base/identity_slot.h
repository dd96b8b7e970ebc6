// Direct-mapped tables keyed by an object's identity (a pointer that stands for one object, such as
// MrDesc::identity): which slot an identity takes.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fabric_lib {

// The slot of `identity` in a table of 2^kBits slots. Fibonacci hashing (the address times 2^64
// divided by the golden ratio, its top kBits bits): heap addresses of one allocation size differ
// in a few middle bits only, which this spreads over every slot, where a shift and a modulo would
// leave slots unused.
// `bits` in [1, 31]; the template form checks its count at compile time.
inline size_t identity_slot(const void* identity, unsigned bits) {
  return static_cast<size_t>((reinterpret_cast<uintptr_t>(identity) * 0x9E3779B97F4A7C15ull) >> (64 - bits));
}
template <unsigned kBits>
inline size_t identity_slot(const void* identity) {
  static_assert(kBits > 0 && kBits < 32, "a table of 2 to 2^31 slots");
  return identity_slot(identity, kBits);
}

}  // namespace fabric_lib

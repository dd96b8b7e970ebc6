// The imm values the weights app uses (the application's namespace of the engine's ImmCounter;
// nothing else on the same engines may use values whose top nibble is 0xA, 0xB or 0xC):
//   data(v)      0xA | 0 | v   every WR of version v into inference memory carries it; inference
//                              rank r expects InferencePlan::data_imms of them
//   done(v)      0xB | 0 | v   each trainer's end-of-step barrier imm to every inference rank and
//                              every other trainer (expected: trainers, resp. trainers - 1)
//   gather(v,g)  0xC | g | v   contributions into a trainer's staging buffer for group g
// with v = version mod 2^24 (bits 23..0) and g in bits 27..24.
#pragma once

#include <cstdint>

namespace fabric_lib::weights {

inline constexpr uint32_t kVersionMask = 0x00ffffffu;
inline uint32_t data_imm(uint64_t version) { return 0xa0000000u | (static_cast<uint32_t>(version) & kVersionMask); }
inline uint32_t done_imm(uint64_t version) { return 0xb0000000u | (static_cast<uint32_t>(version) & kVersionMask); }
inline uint32_t gather_imm(uint64_t version, uint32_t group) {
  return 0xc0000000u | ((group & 0xfu) << 24) | (static_cast<uint32_t>(version) & kVersionMask);
}

}  // namespace fabric_lib::weights

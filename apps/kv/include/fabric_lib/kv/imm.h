// Per-request imm values: a tag, a generation and a slot packed into the 32-bit imm, so a late
// write of an earlier request on the same slot (a cancelled or failed one) is counted under a
// different value and can never complete the request that reuses the slot.
//
//   bit 31..28  tag (the application's namespace inside the engine's imm space)
//   bit 27..16  generation (bumped each time the slot is reused; wraps after 4096 uses)
//   bit 15..0   slot
#pragma once

#include <cstdint>
#include <vector>

#include "fabric_lib/fabric_lib.h"

namespace fabric_lib::kv {

inline constexpr uint32_t kImmSlotBits = 16;
inline constexpr uint32_t kImmGenerationBits = 12;
inline constexpr uint32_t kImmMaxSlots = 1u << kImmSlotBits;
inline constexpr uint32_t kImmGenerations = 1u << kImmGenerationBits;
inline constexpr uint32_t kDefaultImmTag = 0xA;

constexpr uint32_t make_request_imm(uint32_t tag, uint32_t generation, uint32_t slot) {
  return ((tag & 0xF) << 28) | ((generation & (kImmGenerations - 1)) << kImmSlotBits) | (slot & (kImmMaxSlots - 1));
}
constexpr uint32_t imm_tag(uint32_t imm) { return imm >> 28; }
constexpr uint32_t imm_generation(uint32_t imm) { return (imm >> kImmSlotBits) & (kImmGenerations - 1); }
constexpr uint32_t imm_slot(uint32_t imm) { return imm & (kImmMaxSlots - 1); }

// Hands out request imms from `slots` slots. A released slot is reused least recently first, with
// its generation bumped. Not thread-safe (the decoder holds its lock).
class ImmAllocator {
 public:
  explicit ImmAllocator(uint32_t slots, uint32_t tag = kDefaultImmTag);
  // ResourceExhausted when every slot is in use.
  Result<uint32_t> allocate();
  // Returns the slot of `imm` (NotFound when it is not the slot's current, allocated imm).
  Status release(uint32_t imm);
  uint32_t in_use() const { return in_use_; }
  uint32_t slots() const { return static_cast<uint32_t>(generation_.size()); }

 private:
  uint32_t tag_;
  std::vector<uint16_t> generation_;
  std::vector<bool> allocated_;
  std::vector<uint32_t> free_;  // a FIFO ring of free slots
  size_t free_head_ = 0;
  size_t free_count_ = 0;
  uint32_t in_use_ = 0;
};

}  // namespace fabric_lib::kv

#include "fabric_lib/kv/imm.h"

#include <algorithm>

namespace fabric_lib::kv {

ImmAllocator::ImmAllocator(uint32_t slots, uint32_t tag)
    : tag_(tag & 0xF), generation_(std::clamp<uint32_t>(slots, 1, kImmMaxSlots), 0),
      allocated_(generation_.size(), false), free_(generation_.size()) {
  for (uint32_t s = 0; s < free_.size(); ++s) free_[s] = s;
  free_count_ = free_.size();
}

Result<uint32_t> ImmAllocator::allocate() {
  if (free_count_ == 0) return resource_exhausted("kv: every request imm slot is in use");
  const uint32_t slot = free_[free_head_];
  free_head_ = (free_head_ + 1) % free_.size();
  --free_count_;
  allocated_[slot] = true;
  generation_[slot] = static_cast<uint16_t>((generation_[slot] + 1) % kImmGenerations);
  ++in_use_;
  return make_request_imm(tag_, generation_[slot], slot);
}

Status ImmAllocator::release(uint32_t imm) {
  const uint32_t slot = imm_slot(imm);
  if (imm_tag(imm) != tag_ || slot >= generation_.size() || !allocated_[slot] ||
      imm_generation(imm) != generation_[slot]) {
    return not_found("kv: imm is not an allocated request imm");
  }
  allocated_[slot] = false;
  free_[(free_head_ + free_count_) % free_.size()] = slot;
  ++free_count_;
  --in_use_;
  return ok_status();
}

}  // namespace fabric_lib::kv

// identity_slot: every identity lands inside the table, one identity always in one slot, and
// identities that differ only in the bits a shift-and-modulo drops (page-aligned allocations, the
// peer registry's old mapping) or keeps few of (allocations of one size) spread over the slots.
#include "base/identity_slot.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <set>
#include <vector>

namespace fabric_lib {
namespace {

const void* at(uintptr_t address) { return reinterpret_cast<const void*>(address); }

TEST(IdentitySlot, AnIdentityAlwaysTakesOneSlotInsideTheTable) {
  for (uintptr_t a : {uintptr_t{0}, uintptr_t{16}, uintptr_t{0x7f0012345670}, ~uintptr_t{0}}) {
    EXPECT_LT(identity_slot<4>(at(a)), 16u);
    EXPECT_LT(identity_slot<8>(at(a)), 256u);
    EXPECT_EQ(identity_slot<8>(at(a)), identity_slot<8>(at(a)));
    EXPECT_EQ(identity_slot(at(a), 8), identity_slot<8>(at(a)));  // the run-time form, the same slot
    EXPECT_EQ(identity_slot(at(a), 5), identity_slot<5>(at(a)));
  }
}

TEST(IdentitySlot, PageAlignedIdentitiesSpreadOverTheSlots) {
  // 64 identities 4 KiB apart: (address >> 4) % 256 put them all in one slot.
  std::set<size_t> slots, small;
  for (uintptr_t i = 0; i < 64; ++i) {
    slots.insert(identity_slot<8>(at(0x7f0000000000 + i * 4096)));
    small.insert(identity_slot<4>(at(0x7f0000000000 + i * 4096)));
  }
  EXPECT_GE(slots.size(), 40u);
  EXPECT_GE(small.size(), 12u);
}

TEST(IdentitySlot, HeapAllocationsOfOneSizeSpreadOverTheSlots) {
  std::vector<std::unique_ptr<char[]>> blocks;
  std::set<size_t> slots;
  for (int i = 0; i < 64; ++i) {
    blocks.push_back(std::make_unique<char[]>(96));
    slots.insert(identity_slot<8>(blocks.back().get()));
  }
  EXPECT_GE(slots.size(), 40u);
}

}  // namespace
}  // namespace fabric_lib

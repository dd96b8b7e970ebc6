#include <gtest/gtest.h>

#include <set>

#include "fabric_lib/kv/imm.h"

namespace fabric_lib::kv {
namespace {

TEST(KvImm, PacksTagGenerationAndSlot) {
  const uint32_t imm = make_request_imm(0xA, 0x123, 0x4567);
  EXPECT_EQ(imm_tag(imm), 0xAu);
  EXPECT_EQ(imm_generation(imm), 0x123u);
  EXPECT_EQ(imm_slot(imm), 0x4567u);
}

TEST(KvImm, ReusedSlotsGetANewGeneration) {
  ImmAllocator a(2);
  auto x = a.allocate(), y = a.allocate();
  ASSERT_TRUE(x.ok() && y.ok());
  EXPECT_NE(imm_slot(*x), imm_slot(*y));
  EXPECT_EQ(a.allocate().status().code(), ErrorCode::kResourceExhausted);
  ASSERT_TRUE(a.release(*x).ok());
  EXPECT_EQ(a.release(*x).code(), ErrorCode::kNotFound) << "double release";
  auto z = a.allocate();
  ASSERT_TRUE(z.ok());
  EXPECT_EQ(imm_slot(*z), imm_slot(*x));
  EXPECT_NE(*z, *x) << "same slot, new generation: a late write of x cannot count for z";
  EXPECT_EQ(a.release(*x).code(), ErrorCode::kNotFound) << "stale generation";
  EXPECT_EQ(a.in_use(), 2u);
}

TEST(KvImm, ValuesDoNotRepeatWithinTheGenerationCycle) {
  ImmAllocator a(3);
  std::set<uint32_t> seen;
  for (uint32_t i = 0; i < 3 * (kImmGenerations - 1); ++i) {
    auto v = a.allocate();
    ASSERT_TRUE(v.ok());
    EXPECT_TRUE(seen.insert(*v).second) << "imm " << *v << " repeated after " << i;
    ASSERT_TRUE(a.release(*v).ok());
  }
}

}  // namespace
}  // namespace fabric_lib::kv

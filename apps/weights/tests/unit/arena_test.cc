#include <gtest/gtest.h>

#include "../../src/arena.h"

namespace fabric_lib::weights::detail {
namespace {

TEST(Arena, FirstFitWithMergingInAnyReleaseOrder) {
  Arena a(1024);
  auto x = a.allocate(100), y = a.allocate(200), z = a.allocate(300);
  ASSERT_TRUE(x && y && z);
  EXPECT_EQ(*x, 0u);
  EXPECT_EQ(*y, 128u);   // 64-byte granules
  EXPECT_EQ(*z, 384u);
  EXPECT_EQ(a.used(), 128u + 256 + 320);
  EXPECT_FALSE(a.allocate(400).has_value());  // 320 left
  a.release(*y, 200);
  EXPECT_FALSE(a.allocate(400).has_value());  // 256 + 320, not adjacent
  a.release(*z, 300);                         // merges with y's range and the tail
  auto big = a.allocate(896);
  ASSERT_TRUE(big.has_value());
  EXPECT_EQ(*big, 128u);
  a.release(*x, 100);
  a.release(*big, 896);
  EXPECT_EQ(a.used(), 0u);
  auto all = a.allocate(1024);
  ASSERT_TRUE(all.has_value());
  EXPECT_EQ(*all, 0u);
}

}  // namespace
}  // namespace fabric_lib::weights::detail

// largest_index: the sixteen-lane maximum equals std::max_element's for every length and every
// position of the largest value (lanes, the tail after the last full group of sixteen, both ends).
#include "base/largest_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

namespace fabric_lib {
namespace {

uint32_t reference(const std::vector<uint32_t>& v) { return v.empty() ? 0 : *std::max_element(v.begin(), v.end()); }

TEST(LargestIndex, EmptyIsZero) { EXPECT_EQ(largest_index({}), 0u); }

TEST(LargestIndex, TheLargestIsFoundAtEveryPositionOfEveryLength) {
  std::mt19937 rng(7);
  for (size_t n = 1; n <= 80; ++n) {
    for (size_t at = 0; at < n; ++at) {
      std::vector<uint32_t> v(n);
      for (uint32_t& x : v) x = rng() % 1000;
      v[at] = 5000 + static_cast<uint32_t>(at);  // the one largest, here
      ASSERT_EQ(largest_index(v), reference(v)) << "length " << n << ", largest at " << at;
    }
  }
}

TEST(LargestIndex, FullRangeValuesAndLongLists) {
  std::mt19937 rng(11);
  for (size_t n : {4096u, 4097u, 65536u + 15u}) {
    std::vector<uint32_t> v(n);
    for (uint32_t& x : v) x = rng();  // the top bit set in about half: no signed compare may slip in
    EXPECT_EQ(largest_index(v), reference(v)) << n;
    v[n - 1] = UINT32_MAX;
    EXPECT_EQ(largest_index(v), UINT32_MAX) << n;
    v[n - 1] = 0;
    v[0] = UINT32_MAX;
    EXPECT_EQ(largest_index(v), UINT32_MAX) << n;
  }
  std::vector<uint32_t> small(33, 0x80000000u);
  small[32] = 0x7fffffffu;  // larger as a signed number, smaller as an unsigned one
  EXPECT_EQ(largest_index(small), 0x80000000u);
}

}  // namespace
}  // namespace fabric_lib

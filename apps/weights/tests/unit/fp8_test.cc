#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "fabric_lib/weights/fp8.h"
#include "fabric_lib/weights/types.h"

namespace fabric_lib::weights {
namespace {

TEST(Fp8, KnownEncodings) {
  EXPECT_EQ(f32_to_e4m3fn(1.0f), 0x38);
  EXPECT_EQ(f32_to_e4m3fn(-1.0f), 0xb8);
  EXPECT_EQ(f32_to_e4m3fn(448.0f), 0x7e);
  EXPECT_EQ(f32_to_e4m3fn(449.0f), 0x7e);     // saturates
  EXPECT_EQ(f32_to_e4m3fn(1e30f), 0x7e);
  EXPECT_EQ(f32_to_e4m3fn(-1e30f), 0xfe);
  EXPECT_EQ(f32_to_e4m3fn(0.0f), 0x00);
  EXPECT_EQ(f32_to_e4m3fn(-0.0f), 0x80);
  EXPECT_EQ(f32_to_e4m3fn(std::ldexp(1.0f, -9)), 0x01);  // smallest subnormal
  EXPECT_EQ(f32_to_e4m3fn(std::ldexp(1.0f, -10)), 0x00); // tie -> even (0)
  EXPECT_EQ(f32_to_e4m3fn(std::ldexp(3.0f, -10)), 0x02); // 1.5 ulp -> even (2)
  EXPECT_EQ(f32_to_e4m3fn(std::ldexp(1.0f, -6)), 0x08);  // smallest normal
  EXPECT_EQ(f32_to_e4m3fn(std::ldexp(15.5f, -10)), 0x08); // rounds up into the normals
  EXPECT_EQ(f32_to_e4m3fn(1.0625f), 0x38);   // tie between 1.0 and 1.125 -> even (1.0)
  EXPECT_EQ(f32_to_e4m3fn(1.1875f), 0x3a);   // tie between 1.125 and 1.25 -> even (1.25)
  EXPECT_EQ(f32_to_e4m3fn(std::nanf("")) & 0x7f, 0x7f);
  EXPECT_TRUE(std::isnan(e4m3fn_to_f32(0x7f)));
  EXPECT_EQ(e4m3fn_to_f32(0x7e), 448.0f);
  EXPECT_EQ(e4m3fn_to_f32(0x01), std::ldexp(1.0f, -9));
}

TEST(Fp8, EveryFiniteCodeRoundTripsAndMidpointsTieToEven) {
  for (int s = 0; s < 2; ++s) {
    for (int code = 0; code < 0x7e; ++code) {
      const uint8_t q = static_cast<uint8_t>(code | (s << 7));
      const uint8_t next = static_cast<uint8_t>((code + 1) | (s << 7));
      EXPECT_EQ(f32_to_e4m3fn(e4m3fn_to_f32(q)), q) << code;
      const float mid = (e4m3fn_to_f32(q) + e4m3fn_to_f32(next)) / 2;  // exact in f32
      EXPECT_EQ(f32_to_e4m3fn(mid), (code & 1) ? next : q) << code;
      const float above = std::nextafter(mid, s ? -1e9f : 1e9f), below = std::nextafter(mid, 0.0f);
      EXPECT_EQ(f32_to_e4m3fn(above), next) << code;
      EXPECT_EQ(f32_to_e4m3fn(below), q) << code;
    }
  }
}

TEST(Fp8, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3f808000)), 0x3f80);  // tie -> even
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3f818000)), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3f808001)), 0x3f81);
  EXPECT_EQ(f32_to_bf16(std::nanf("")) & 0x7fc0, 0x7fc0);
  EXPECT_EQ(bf16_to_f32(0xc000), -2.0f);
}

TEST(Fp8, BlockQuantizationRules) {
  // 200 x 300: 2 x 3 blocks, partial at the right and bottom edges.
  const size_t rows = 200, cols = 300;
  std::vector<float> x(rows * cols);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i)) * static_cast<float>(1 + i % 7);
  for (size_t r = 0; r < 128; ++r) {
    for (size_t c = 128; c < 256; ++c) x[r * cols + c] = (r + c) % 2 ? 0.0f : -0.0f;  // zero block (0, 1)
  }
  x[150 * cols + 260] = std::numeric_limits<float>::infinity();  // poisons block (1, 2)
  std::vector<uint8_t> q(rows * cols);
  std::vector<float> scales(2 * 3);
  quantize_fp8_blocks_f32(x.data(), cols, rows, cols, q.data(), cols, scales.data(), 3);
  EXPECT_EQ(scales[1], 1.0f);
  EXPECT_EQ(q[0 * cols + 128], 0x80);  // -0.0 keeps its sign
  EXPECT_EQ(q[0 * cols + 129], 0x00);
  EXPECT_EQ(f32_to_bits(scales[5]), kPoisonedScaleBits);
  EXPECT_EQ(q[199 * cols + 299], 0x7f);
  EXPECT_EQ(q[128 * cols + 256], 0x7f);
  // Ordinary blocks: scale = amax / 448, the element at amax encodes +-448, and every element is
  // the e4m3 rounding of x / scale.
  for (size_t b : {0, 2, 3, 4}) {
    const size_t br = b / 3, bc = b % 3;
    float amax = 0;
    for (size_t r = br * 128; r < std::min(rows, br * 128 + 128); ++r) {
      for (size_t c = bc * 128; c < std::min(cols, bc * 128 + 128); ++c) amax = std::max(amax, std::fabs(x[r * cols + c]));
    }
    ASSERT_EQ(scales[b], amax / 448.0f);
    bool saw_max = false;
    for (size_t r = br * 128; r < std::min(rows, br * 128 + 128); ++r) {
      for (size_t c = bc * 128; c < std::min(cols, bc * 128 + 128); ++c) {
        ASSERT_EQ(q[r * cols + c], f32_to_e4m3fn(x[r * cols + c] / scales[b]));
        saw_max |= (q[r * cols + c] & 0x7f) == 0x7e;
        const float deq = e4m3fn_to_f32(q[r * cols + c]) * scales[b];
        ASSERT_LE(std::fabs(deq - x[r * cols + c]), amax / 16);  // 3 mantissa bits
      }
    }
    EXPECT_TRUE(saw_max) << b;
  }
  // bf16 input gives the same bytes as its f32 widening.
  std::vector<uint16_t> xb(x.size());
  std::vector<float> xw(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    xb[i] = f32_to_bf16(x[i]);
    xw[i] = bf16_to_f32(xb[i]);
  }
  std::vector<uint8_t> qb(q.size()), qw(q.size());
  std::vector<float> sb(6), sw(6);
  quantize_fp8_blocks_bf16(xb.data(), cols, rows, cols, qb.data(), cols, sb.data(), 3);
  quantize_fp8_blocks_f32(xw.data(), cols, rows, cols, qw.data(), cols, sw.data(), 3);
  EXPECT_EQ(qb, qw);
  EXPECT_EQ(0, std::memcmp(sb.data(), sw.data(), sb.size() * 4));
}

}  // namespace
}  // namespace fabric_lib::weights

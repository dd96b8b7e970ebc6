#include "fabric_lib/weights/fp8.h"

#include <algorithm>
#include <cmath>

#include "fabric_lib/weights/types.h"

namespace fabric_lib::weights {

uint16_t f32_to_bf16(float f) {
  const uint32_t b = f32_to_bits(f);
  if ((b & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((b >> 16) | 0x0040u);  // quiet NaN
  const uint32_t lsb = (b >> 16) & 1u;
  return static_cast<uint16_t>((b + 0x7fffu + lsb) >> 16);
}

uint8_t f32_to_e4m3fn(float v) {
  const uint32_t b = f32_to_bits(v);
  const uint8_t sign = static_cast<uint8_t>((b >> 24) & 0x80u);
  const uint32_t a = b & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7f;        // NaN
  if (a >= 0x43e00000u) return sign | 0x7e;       // >= 448 (and inf): saturate
  if (a < 0x3c800000u) {                          // < 2^-6: the subnormal grid m * 2^-9
    // |v| * 512 is exact (a power-of-two scaling of a value far from overflow); round the
    // integer part to nearest even by hand so the result does not depend on the FP mode.
    const float s = bits_to_f32(a) * 512.0f;
    uint32_t m = static_cast<uint32_t>(s);        // floor (s >= 0)
    const float frac = s - static_cast<float>(m);  // exact: s < 8 has few integer bits
    if (frac > 0.5f || (frac == 0.5f && (m & 1u))) ++m;
    return sign | static_cast<uint8_t>(m);        // m == 8 is the smallest normal, 0x08: same code
  }
  uint32_t exp = (a >> 23) - 127 + 7;             // 1..15
  uint32_t mant = a & 0x7fffffu;
  uint32_t keep = mant >> 20;
  const uint32_t rest = mant & 0xfffffu;
  if (rest > 0x80000u || (rest == 0x80000u && (keep & 1u))) ++keep;
  if (keep == 8) {
    keep = 0;
    ++exp;
  }
  uint32_t code = (exp << 3) | keep;
  if (code > 0x7e) code = 0x7e;
  return sign | static_cast<uint8_t>(code);
}

float e4m3fn_to_f32(uint8_t q) {
  const float sign = (q & 0x80) ? -1.0f : 1.0f;
  const uint32_t e = (q >> 3) & 0xf, m = q & 7;
  if (e == 0xf && m == 7) return bits_to_f32(kPoisonedScaleBits);
  if (e == 0) return sign * std::ldexp(static_cast<float>(m), -9);
  return sign * std::ldexp(1.0f + static_cast<float>(m) / 8.0f, static_cast<int>(e) - 7);
}

namespace {

template <typename Load>
void quantize_blocks(Load load, size_t rows, size_t cols, uint8_t* q, size_t q_pitch, float* scales,
                     size_t scale_pitch) {
  for (size_t r0 = 0; r0 < rows; r0 += kFp8Block) {
    const size_t r1 = std::min(rows, r0 + kFp8Block);
    for (size_t c0 = 0; c0 < cols; c0 += kFp8Block) {
      const size_t c1 = std::min(cols, c0 + kFp8Block);
      float amax = 0.0f;
      bool poisoned = false;
      for (size_t r = r0; r < r1; ++r) {
        for (size_t c = c0; c < c1; ++c) {
          const float x = load(r, c);
          if (!std::isfinite(x)) poisoned = true;
          amax = std::max(amax, std::fabs(x));
        }
      }
      float& scale = scales[(r0 / kFp8Block) * scale_pitch + c0 / kFp8Block];
      if (poisoned) {
        scale = bits_to_f32(kPoisonedScaleBits);
        for (size_t r = r0; r < r1; ++r) std::memset(q + r * q_pitch + c0, 0x7f, c1 - c0);
        continue;
      }
      scale = amax == 0.0f ? 1.0f : amax / kFp8E4m3Max;
      for (size_t r = r0; r < r1; ++r) {
        for (size_t c = c0; c < c1; ++c) q[r * q_pitch + c] = f32_to_e4m3fn(load(r, c) / scale);
      }
    }
  }
}

}  // namespace

void quantize_fp8_blocks_bf16(const uint16_t* src, size_t src_pitch, size_t rows, size_t cols, uint8_t* q,
                              size_t q_pitch, float* scales, size_t scale_pitch) {
  quantize_blocks([&](size_t r, size_t c) { return bf16_to_f32(src[r * src_pitch + c]); }, rows, cols, q, q_pitch,
                  scales, scale_pitch);
}

void quantize_fp8_blocks_f32(const float* src, size_t src_pitch, size_t rows, size_t cols, uint8_t* q,
                             size_t q_pitch, float* scales, size_t scale_pitch) {
  quantize_blocks([&](size_t r, size_t c) { return src[r * src_pitch + c]; }, rows, cols, q, q_pitch, scales,
                  scale_pitch);
}

}  // namespace fabric_lib::weights

// Element conversions of the prepare step and the CPU reference of fp8 e4m3 128x128 block
// quantization. The CUDA kernel (apps/weights/cuda/) follows exactly these rules, bit for bit.
//
// Block quantization of a rows x cols matrix of f32 values x (bf16 and f32 sources are widened
// to f32 exactly), block (i, j) = rows [128 i, 128 i + 128) x cols [128 j, 128 j + 128), clipped
// at the edges:
//   - amax = max |x| over the block.
//   - A block holding any NaN or infinity is poisoned: scale = NaN (0x7fc00000) and every
//     element is 0x7f (e4m3fn NaN), so dequantization shows the problem instead of hiding it.
//   - amax == 0: scale = 1.0f and every element encodes x / 1 (0x00, or 0x80 for -0.0).
//   - otherwise scale = amax / 448.0f (IEEE f32 division, round to nearest even) and element
//     q = e4m3fn(x / scale), the quotient again an IEEE f32 division.
//   - e4m3fn(v): round to nearest, ties to even, on the e4m3fn grid (subnormals 2^-9 * m,
//     normals up to 448); |v| >= 448 saturates to +-448 (0x7e / 0xfe), never to NaN (the
//     quotient can exceed 448 by an ulp through the rounding of scale). The sign is kept
//     (-0.0 -> 0x80).
// Dequantization: value = e4m3fn_to_f32(q) * scale.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace fabric_lib::weights {

inline float bits_to_f32(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
inline uint32_t f32_to_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

inline float bf16_to_f32(uint16_t h) { return bits_to_f32(static_cast<uint32_t>(h) << 16); }
// Round to nearest even; NaN stays NaN (quiet, sign kept).
uint16_t f32_to_bf16(float f);

// f32 -> e4m3fn with the rules above (finite input; NaN input gives 0x7f with its sign bit).
uint8_t f32_to_e4m3fn(float v);
float e4m3fn_to_f32(uint8_t q);

inline constexpr float kFp8E4m3Max = 448.0f;
inline constexpr uint32_t kPoisonedScaleBits = 0x7fc00000u;

// Quantizes a rows x cols matrix (element (r, c) at src[r * src_pitch + c]) into q
// (q[r * q_pitch + c]) and scales (scales[i * scale_pitch + j], ceil(rows/128) x ceil(cols/128)).
void quantize_fp8_blocks_bf16(const uint16_t* src, size_t src_pitch, size_t rows, size_t cols, uint8_t* q,
                              size_t q_pitch, float* scales, size_t scale_pitch);
void quantize_fp8_blocks_f32(const float* src, size_t src_pitch, size_t rows, size_t cols, uint8_t* q,
                             size_t q_pitch, float* scales, size_t scale_pitch);

}  // namespace fabric_lib::weights

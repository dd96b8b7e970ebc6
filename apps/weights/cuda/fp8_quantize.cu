// fp8 e4m3fn 128x128 block quantization kernel (sm_90). One CTA per block: the threads find the
// block's amax (and whether it holds a NaN/inf), then each encodes its elements. Rules and the
// bit-level rounding are those of fp8.h / fp8.cc, written again for the device; division is
// __fdiv_rn (IEEE round to nearest even) whatever the compiler flags.
#include <cuda_runtime.h>

#include <cstdint>

#include "fp8_quantize_launch.h"

namespace fabric_lib::weights::cuda {
namespace {

constexpr int kBlock = 128;
constexpr int kThreads = 256;

__device__ __forceinline__ uint8_t f32_to_e4m3fn(float v) {
  const uint32_t b = __float_as_uint(v);
  const uint8_t sign = static_cast<uint8_t>((b >> 24) & 0x80u);
  const uint32_t a = b & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7f;
  if (a >= 0x43e00000u) return sign | 0x7e;
  if (a < 0x3c800000u) {
    const float s = __fmul_rn(__uint_as_float(a), 512.0f);
    uint32_t m = static_cast<uint32_t>(s);
    const float frac = __fsub_rn(s, static_cast<float>(m));
    if (frac > 0.5f || (frac == 0.5f && (m & 1u))) ++m;
    return sign | static_cast<uint8_t>(m);
  }
  uint32_t exp = (a >> 23) - 127 + 7;
  uint32_t keep = (a & 0x7fffffu) >> 20;
  const uint32_t rest = a & 0xfffffu;
  if (rest > 0x80000u || (rest == 0x80000u && (keep & 1u))) ++keep;
  if (keep == 8) {
    keep = 0;
    ++exp;
  }
  uint32_t code = (exp << 3) | keep;
  if (code > 0x7e) code = 0x7e;
  return sign | static_cast<uint8_t>(code);
}

__device__ __forceinline__ float load(const uint16_t* p) { return __uint_as_float(static_cast<uint32_t>(*p) << 16); }
__device__ __forceinline__ float load(const float* p) { return *p; }

template <typename T>
__global__ void quantize_kernel(const T* __restrict__ src, size_t src_pitch, size_t rows, size_t cols,
                                uint8_t* __restrict__ q, size_t q_pitch, float* __restrict__ scales, size_t scale_pitch) {
  const size_t r0 = static_cast<size_t>(blockIdx.y) * kBlock, c0 = static_cast<size_t>(blockIdx.x) * kBlock;
  const int nr = static_cast<int>(min(static_cast<size_t>(kBlock), rows - r0));
  const int nc = static_cast<int>(min(static_cast<size_t>(kBlock), cols - c0));
  float amax = 0.0f;
  int bad = 0;
  for (int i = threadIdx.x; i < kBlock * kBlock; i += kThreads) {
    const int r = i / kBlock, c = i % kBlock;
    if (r < nr && c < nc) {
      const float x = load(src + (r0 + r) * src_pitch + c0 + c);
      bad |= !isfinite(x);
      amax = fmaxf(amax, fabsf(x));
    }
  }
  for (int off = 16; off > 0; off >>= 1) {
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    bad |= __shfl_xor_sync(0xffffffffu, bad, off);
  }
  __shared__ float warp_amax[kThreads / 32];
  __shared__ int warp_bad[kThreads / 32];
  __shared__ float block_scale;
  __shared__ int block_bad;
  if ((threadIdx.x & 31) == 0) {
    warp_amax[threadIdx.x / 32] = amax;
    warp_bad[threadIdx.x / 32] = bad;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float m = 0.0f;
    int b = 0;
    for (int w = 0; w < kThreads / 32; ++w) {
      m = fmaxf(m, warp_amax[w]);
      b |= warp_bad[w];
    }
    block_bad = b;
    block_scale = b ? __uint_as_float(0x7fc00000u) : (m == 0.0f ? 1.0f : __fdiv_rn(m, 448.0f));
    scales[blockIdx.y * scale_pitch + blockIdx.x] = block_scale;
  }
  __syncthreads();
  const float scale = block_scale;
  const int poisoned = block_bad;
  for (int i = threadIdx.x; i < kBlock * kBlock; i += kThreads) {
    const int r = i / kBlock, c = i % kBlock;
    if (r < nr && c < nc) {
      uint8_t* out = q + (r0 + r) * q_pitch + c0 + c;
      *out = poisoned ? uint8_t{0x7f} : f32_to_e4m3fn(__fdiv_rn(load(src + (r0 + r) * src_pitch + c0 + c), scale));
    }
  }
}

}  // namespace

int launch_quantize_fp8(bool src_is_bf16, const void* src, size_t src_pitch, size_t rows, size_t cols, uint8_t* q,
                        size_t q_pitch, float* scales, size_t scale_pitch, void* stream) {
  const dim3 grid(static_cast<unsigned>((cols + kBlock - 1) / kBlock), static_cast<unsigned>((rows + kBlock - 1) / kBlock));
  auto s = static_cast<cudaStream_t>(stream);
  if (src_is_bf16) {
    quantize_kernel<uint16_t><<<grid, kThreads, 0, s>>>(static_cast<const uint16_t*>(src), src_pitch, rows, cols, q,
                                                         q_pitch, scales, scale_pitch);
  } else {
    quantize_kernel<float><<<grid, kThreads, 0, s>>>(static_cast<const float*>(src), src_pitch, rows, cols, q, q_pitch,
                                                      scales, scale_pitch);
  }
  return static_cast<int>(cudaGetLastError());
}

const char* cuda_error_string(int code) { return cudaGetErrorString(static_cast<cudaError_t>(code)); }

}  // namespace fabric_lib::weights::cuda

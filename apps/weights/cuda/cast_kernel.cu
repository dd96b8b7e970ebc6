// Element casts of the prepare step on the GPU (bf16 <-> f32, round to nearest even as
// fp8.h's f32_to_bf16), over a pitched rows x cols box.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "fp8_quantize_launch.h"

namespace fabric_lib::weights::cuda {
namespace {

__device__ __forceinline__ uint16_t to_bf16(float f) {
  const uint32_t b = __float_as_uint(f);
  if ((b & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((b >> 16) | 0x0040u);
  return static_cast<uint16_t>((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

__global__ void f32_to_bf16_kernel(const float* src, size_t src_pitch, uint16_t* dst, size_t rows, size_t cols) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < rows * cols; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    dst[i] = to_bf16(src[(i / cols) * src_pitch + i % cols]);
  }
}

__global__ void bf16_to_f32_kernel(const uint16_t* src, size_t src_pitch, float* dst, size_t rows, size_t cols) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < rows * cols; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    dst[i] = __uint_as_float(static_cast<uint32_t>(src[(i / cols) * src_pitch + i % cols]) << 16);
  }
}

}  // namespace

int launch_cast(bool f32_to_bf16, const void* src, size_t src_pitch, void* dst, size_t rows, size_t cols, void* stream) {
  const size_t n = rows * cols;
  const unsigned blocks = static_cast<unsigned>(std::min<size_t>(4096, (n + 255) / 256));
  auto s = static_cast<cudaStream_t>(stream);
  if (f32_to_bf16) {
    f32_to_bf16_kernel<<<blocks, 256, 0, s>>>(static_cast<const float*>(src), src_pitch, static_cast<uint16_t*>(dst), rows, cols);
  } else {
    bf16_to_f32_kernel<<<blocks, 256, 0, s>>>(static_cast<const uint16_t*>(src), src_pitch, static_cast<float*>(dst), rows, cols);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace fabric_lib::weights::cuda

#include "gpu/page_copy_kernel.h"

namespace fabric_lib::gpu {
namespace {

// 256 threads x 16 bytes = 4 KiB per step: a 4 KiB page is one load per thread, a full
// 16 KiB piece four.
constexpr uint32_t kThreads = 256;

__global__ void page_copy_kernel(const PageCopyPiece* pieces) {
  // The piece may live in host memory: one thread reads it, the block shares it.
  __shared__ PageCopyPiece piece;
  if (threadIdx.x == 0) piece = pieces[blockIdx.x];
  __syncthreads();
  const uint8_t* src = piece.src;
  uint8_t* dst = piece.dst;
  const uint64_t length = piece.length;
  const bool aligned = ((reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst)) & 15) == 0;
  if (aligned) {
    const uint64_t whole = length / 16 * 16;
    for (uint64_t i = uint64_t{threadIdx.x} * 16; i < whole; i += uint64_t{kThreads} * 16) {
      *reinterpret_cast<uint4*>(dst + i) = __ldg(reinterpret_cast<const uint4*>(src + i));
    }
    for (uint64_t t = whole + threadIdx.x; t < length; t += kThreads) dst[t] = src[t];  // < 16 bytes
  } else {
    for (uint64_t t = threadIdx.x; t < length; t += kThreads) dst[t] = src[t];
  }
  // The bytes must be visible system-wide (to the peer process) once the launch is complete.
  __threadfence_system();
}

}  // namespace

cudaError_t load_page_copy_kernel() {
  cudaFuncAttributes attr;
  return cudaFuncGetAttributes(&attr, page_copy_kernel);
}

cudaError_t launch_page_copy(const PageCopyPiece* pieces, uint32_t count, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  page_copy_kernel<<<count, kThreads, 0, stream>>>(pieces);
  return cudaGetLastError();
}

}  // namespace fabric_lib::gpu

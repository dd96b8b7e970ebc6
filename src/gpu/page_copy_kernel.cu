#include "gpu/page_copy_kernel.h"

namespace fabric_lib::gpu {
namespace {

constexpr uint32_t kThreads = 512;
constexpr uint64_t kBytesPerBlock = 32 * 1024;  // a copy gets one block per this many bytes...
constexpr uint32_t kMaxBlocksPerCopy = 16;      // ...up to this many

__global__ void page_copy_kernel(const PageCopyBatch batch) {
  // Which copy this block serves: the last i with first_block[i] <= blockIdx.x.
  uint32_t lo = 0, hi = batch.count;
  while (hi - lo > 1) {
    const uint32_t mid = (lo + hi) / 2;
    if (batch.first_block[mid] <= blockIdx.x) lo = mid; else hi = mid;
  }
  const uint32_t blocks = batch.first_block[lo + 1] - batch.first_block[lo];
  const uint32_t part = blockIdx.x - batch.first_block[lo];
  const uint64_t length = batch.length[lo];
  // This block's share, in 16-byte units so that aligned copies stay aligned.
  const uint64_t per = ((length + blocks - 1) / blocks + 15) / 16 * 16;
  const uint64_t begin = per * part;
  if (begin >= length) return;
  const uint64_t end = begin + per < length ? begin + per : length;
  const uint8_t* src = batch.src[lo];
  uint8_t* dst = batch.dst[lo];
  const bool aligned = ((reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst)) & 15) == 0;
  uint64_t i = begin + threadIdx.x * 16;
  if (aligned) {
    for (; i + 16 <= end; i += uint64_t{kThreads} * 16) {
      *reinterpret_cast<uint4*>(dst + i) = __ldg(reinterpret_cast<const uint4*>(src + i));
    }
    // The tail (< 16 bytes, only in the copy's last block): one byte per thread.
    const uint64_t tail = end - (end - begin) % 16;
    for (uint64_t t = tail + threadIdx.x; t < end; t += kThreads) dst[t] = src[t];
  } else {
    for (uint64_t t = begin + threadIdx.x; t < end; t += kThreads) dst[t] = src[t];
  }
  // The bytes must be visible system-wide (to the peer process) once the launch is complete.
  __threadfence_system();
}

}  // namespace

void plan_page_copy_blocks(PageCopyBatch& batch) {
  uint32_t block = 0;
  for (uint32_t i = 0; i < batch.count; ++i) {
    batch.first_block[i] = block;
    uint64_t n = (batch.length[i] + kBytesPerBlock - 1) / kBytesPerBlock;
    if (n == 0) n = 1;
    if (n > kMaxBlocksPerCopy) n = kMaxBlocksPerCopy;
    block += static_cast<uint32_t>(n);
  }
  batch.first_block[batch.count] = block;
}

cudaError_t load_page_copy_kernel() {
  cudaFuncAttributes attr;
  return cudaFuncGetAttributes(&attr, page_copy_kernel);
}

cudaError_t launch_page_copy(const PageCopyBatch& batch, cudaStream_t stream) {
  if (batch.count == 0) return cudaSuccess;
  page_copy_kernel<<<batch.first_block[batch.count], kThreads, 0, stream>>>(batch);
  return cudaGetLastError();
}

}  // namespace fabric_lib::gpu

// The tests' expert layer on the GPU (expert_kernel.h). Built with --fmad=false: each product is
// rounded on its own, as in the host reference, so outputs compare bit for bit.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "expert_kernel.h"

namespace fabric_lib::moe::testing {
namespace {

constexpr uint32_t kMaxLocal = 512;

__global__ void expert_kernel(ExpertArgs a) {
  __shared__ uint32_t start[kMaxLocal + 1];
  __shared__ uint32_t valid_end[kMaxLocal];
  if (threadIdx.x == 0) {
    uint32_t off = 0;
    for (uint32_t e = 0; e < a.local_experts; ++e) {
      start[e] = off;
      valid_end[e] = off + static_cast<uint32_t>(a.counts[e]);
      off += (static_cast<uint32_t>(a.counts[e]) + a.padding - 1) / a.padding * a.padding;
    }
    start[a.local_experts] = off;
  }
  __syncthreads();
  const uint32_t total = start[a.local_experts] < a.rows ? start[a.local_experts] : a.rows;
  for (uint32_t row = blockIdx.x; row < total; row += gridDim.x) {
    uint32_t lo = 0, hi = a.local_experts;  // start[lo] <= row < start[hi]
    while (hi - lo > 1) {
      const uint32_t mid = (lo + hi) / 2;
      if (start[mid] <= row) lo = mid; else hi = mid;
    }
    if (row >= valid_end[lo]) continue;  // padding
    const float factor = 1.0f + static_cast<float>((a.first_expert + lo) % 7) / 8.0f;
    const uint32_t block = a.hidden_scale ? (a.hidden + a.hidden_scale - 1) / a.hidden_scale : 1;
    for (uint32_t h = threadIdx.x; h < a.hidden; h += blockDim.x) {
      float v;
      if (a.in_kind == 1) {
        __nv_fp8_e4m3 f;
        f.__x = a.x[size_t{row} * a.hidden + h];
        v = static_cast<float>(f);
      } else if (a.in_kind == 2) {
        v = __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(a.x)[size_t{row} * a.hidden + h]);
      } else {
        v = reinterpret_cast<const float*>(a.x)[size_t{row} * a.hidden + h];
      }
      if (a.hidden_scale) v = __fmul_rn(v, a.scales[size_t{row} * a.hidden_scale + h / block]);
      const float y = __fmul_rn(v, factor);
      if (a.out_fp32) {
        reinterpret_cast<float*>(a.y)[size_t{row} * a.hidden + h] = y;
      } else {
        reinterpret_cast<__nv_bfloat16*>(a.y)[size_t{row} * a.hidden + h] = __float2bfloat16_rn(y);
      }
    }
  }
}

}  // namespace

cudaError_t load_expert_kernel() {
  cudaFuncAttributes attr;
  return cudaFuncGetAttributes(&attr, expert_kernel);
}

cudaError_t launch_expert(const ExpertArgs& a, cudaStream_t stream) {
  if (a.local_experts > kMaxLocal) return cudaErrorInvalidValue;
  uint32_t blocks = a.rows < 1 ? 1 : (a.rows > 1024 ? 1024 : a.rows);
  expert_kernel<<<blocks, 256, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace fabric_lib::moe::testing

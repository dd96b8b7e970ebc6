// combine_recv: waits for every peer's combine results (proxy path: the engine's combine round;
// direct path: the peers' flags), then for each valid token sums w[k] * y[k] over k = 0..K-1 in
// that order in fp32, each product and sum rounded on its own (__fmul_rn / __fadd_rn: no fused
// multiply-add), and writes bf16 (or fp32): bit-identical across runs, EP sizes and the CPU half.
#include "device_common.cuh"

namespace fabric_lib::moe::kernels {
namespace {

constexpr uint32_t kThreads = 256;
constexpr uint32_t kMaxTopK = 64;

__device__ __forceinline__ float load_out(const uint8_t* rec, uint32_t h, bool fp32) {
  if (fp32) return reinterpret_cast<const float*>(rec)[h];
  return __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(rec)[h]);
}

__global__ void __launch_bounds__(kThreads) combine_recv_kernel(Context c, CombineRecvArgs a) {
  const uint64_t step = c.ws->step;
  const bool ready = block_wait([&] {
    if (aborted(c)) return false;
    if (c.direct) {
      for (uint32_t s = 0; s < c.world; ++s) {
        if (s == c.rank) continue;
        if (!wait_at_least(c, reinterpret_cast<const uint64_t*>(direct_flag(c, c.rank, kFlagCombine, s)), step, step)) {
          return false;
        }
      }
      return true;
    }
    return c.world == 1 || wait_at_least(c, control_word(c, kCombineRound), step, step);
  });
  if (!ready) return;
  __shared__ uint32_t pos[kMaxTopK];
  __shared__ float w[kMaxTopK];
  __shared__ uint32_t m;
  if (threadIdx.x == 0) {
    uint32_t given = a.num_tokens;
    if (a.bound_m) {
      const int32_t b = *a.bound_m;
      given = b < 0 ? 0u : (static_cast<uint32_t>(b) < given ? static_cast<uint32_t>(b) : given);
    }
    m = given < c.ws->tokens ? given : c.ws->tokens;
  }
  __syncthreads();
  const bool fp32 = c.out_fp32 != 0;
  for (uint32_t tok = blockIdx.x; tok < m; tok += gridDim.x) {
    if (threadIdx.x < c.top_k) {
      pos[threadIdx.x] = c.positions[size_t{tok} * c.top_k + threadIdx.x];
      w[threadIdx.x] = a.weights[size_t{tok} * a.weights_stride + threadIdx.x];
    }
    __syncthreads();
    uint8_t* out = static_cast<uint8_t*>(a.out_tokens) + size_t{tok} * a.out_stride * c.out_size;
    for (uint32_t h = threadIdx.x; h < c.hidden; h += blockDim.x) {
      float acc = 0.0f;
      for (uint32_t k = 0; k < c.top_k; ++k) {
        const float y = load_out(c.combine_recv + size_t{pos[k]} * c.combine_record, h, fp32);
        acc = __fadd_rn(acc, __fmul_rn(w[k], y));
      }
      if (fp32) {
        reinterpret_cast<float*>(out)[h] = acc;
      } else {
        reinterpret_cast<__nv_bfloat16*>(out)[h] = __float2bfloat16_rn(acc);
      }
    }
    __syncthreads();
  }
}

}  // namespace

cudaError_t launch_combine_recv(const Context& c, const CombineRecvArgs& a, int sms, cudaStream_t stream) {
  uint32_t blocks = a.num_tokens < 1 ? 1 : a.num_tokens;
  if (blocks > static_cast<uint32_t>(4 * sms)) blocks = 4 * sms;
  combine_recv_kernel<<<blocks, kThreads, 0, stream>>>(c, a);
  return cudaGetLastError();
}

cudaError_t load_combine_recv() {
  cudaFuncAttributes attr;
  return cudaFuncGetAttributes(&attr, combine_recv_kernel);  // loads the module now (kernels.h says why)
}

}  // namespace fabric_lib::moe::kernels

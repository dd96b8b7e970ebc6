// combine_send: every received pair's expert output goes back toward its source, in the
// source's sorted order (layout.h): this rank's own into its combine-receive region, the others'
// into the staging region for the proxy's combine scatter (proxy path) or straight into the
// source's IPC-mapped combine-receive region (direct path); then "combine ready" / the flags.
#include "device_common.cuh"

namespace fabric_lib::moe::kernels {
namespace {

constexpr uint32_t kThreads = 256;

__global__ void __launch_bounds__(kThreads) combine_send_kernel(Context c, CombineSendArgs a) {
  extern __shared__ uint32_t smem[];
  SharedPlan sp{{c.world, c.local_experts}, smem, smem + RecvPlanLayout{c.world, c.local_experts}.words()};
  const uint64_t step = c.ws->step;
  const bool ready = block_wait([&] {
    if (aborted(c)) return false;
    return c.direct || wait_at_least(c, control_word(c, kCombineFree), step - 1, step);
  });
  if (ready) {
    for (uint32_t i = threadIdx.x; i < sp.lay.words(); i += blockDim.x) sp.plan[i] = c.plan_copy[i];
    __syncthreads();
    sp.build_prefix();
    const uint32_t row_bytes = c.hidden * c.out_size;
    const uint32_t lane = threadIdx.x % 32;
    const uint32_t warps = gridDim.x * (kThreads / 32);
    const RecvPlanLayout& lay = sp.lay;
    for (uint32_t i = blockIdx.x * (kThreads / 32) + threadIdx.x / 32; i < sp.pairs(); i += warps) {
      uint32_t e, s, j;
      sp.find(i, e, s, j);
      const uint32_t q = sp.plan[lay.blk(s, e)] + j;
      uint8_t* dst;
      if (s == c.rank) {
        dst = c.combine_recv + size_t{sp.plan[lay.rank_off(s)] + q} * c.combine_record;
      } else if (c.direct) {
        dst = c.peers.combine_recv[s] + size_t{sp.plan[lay.rank_off(s)] + q} * c.combine_record;
      } else {
        dst = c.combine_send + size_t{sp.plan[lay.stage_off(s)] + q} * c.combine_record;
      }
      const uint32_t row = output_row(lay, sp.plan, s, e, j);
      warp_copy(dst, static_cast<const uint8_t*>(a.expert_y) + size_t{row} * a.expert_y_stride * c.out_size, row_bytes, lane);
    }
  }
  if (last_block_done(c.ws) && ready) {
    if (c.direct) {
      for (uint32_t s = 0; s < c.world; ++s) {
        if (s != c.rank) store_release(reinterpret_cast<uint64_t*>(direct_flag(c, s, kFlagCombine, c.rank)), step);
      }
    } else {
      store_release(control_word(c, kCombineReady), step);
    }
  }
}

}  // namespace

cudaError_t launch_combine_send(const Context& c, const CombineSendArgs& a, int sms, cudaStream_t stream) {
  const RecvPlanLayout lay{c.world, c.local_experts};
  const size_t smem = (size_t{lay.words()} + size_t{c.world} * c.local_experts + 1) * 4;
  uint32_t blocks = (a.rows + kThreads / 32 - 1) / (kThreads / 32);
  blocks = blocks < 1 ? 1 : (blocks > static_cast<uint32_t>(2 * sms) ? 2 * sms : blocks);
  combine_send_kernel<<<blocks, kThreads, smem, stream>>>(c, a);
  return cudaGetLastError();
}

cudaError_t load_combine_send() {
  cudaFuncAttributes attr;
  return cudaFuncGetAttributes(&attr, combine_send_kernel);  // loads the module now (kernels.h says why)
}

}  // namespace fabric_lib::moe::kernels

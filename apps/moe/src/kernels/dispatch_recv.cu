// dispatch_recv: waits for the step's plan and tokens (proxy path: the proxy's "plan ready" and
// the engine's token round; direct path: every peer's route and token flags, then the plan is
// built here from the blocks they stored), then lays the pairs out expert-contiguous and padded
// (layout.h), with the per-expert counts. Pairs come from the own send buffer (this rank's own),
// the private slots and overflow rows of the receive buffer, or (direct) the sender's send buffer.
#include "device_common.cuh"

namespace fabric_lib::moe::kernels {
namespace {

constexpr uint32_t kThreads = 256;

__global__ void __launch_bounds__(kThreads) dispatch_recv_kernel(Context c, DispatchRecvArgs a) {
  extern __shared__ uint32_t smem[];
  SharedPlan sp{{c.world, c.local_experts}, smem, smem + RecvPlanLayout{c.world, c.local_experts}.words()};
  const uint64_t step = c.ws->step;
  const bool ready = block_wait([&] {
    if (aborted(c)) return false;
    if (c.direct) {
      for (uint32_t s = 0; s < c.world; ++s) {
        if (s == c.rank) continue;
        if (!wait_at_least(c, reinterpret_cast<const uint64_t*>(direct_flag(c, c.rank, kFlagRoutes, s)), step, step)) return false;
        if (!wait_at_least(c, reinterpret_cast<const uint64_t*>(direct_flag(c, c.rank, kFlagTokens, s)), step, step)) return false;
      }
      return true;
    }
    if (!wait_at_least(c, control_word(c, kPlanReady), step, step)) return false;
    return c.world == 1 || wait_at_least(c, control_word(c, kDispatchRound), step, step);
  });
  if (!ready) return;
  if (c.direct) {
    if (!build_plan_from_area(c, step, sp)) return;
  } else {
    const uint32_t* src = c.plans + size_t{route_parity(step)} * sp.lay.words();
    for (uint32_t i = threadIdx.x; i < sp.lay.words(); i += blockDim.x) sp.plan[i] = src[i];
    __syncthreads();
  }
  sp.build_prefix();
  const uint32_t rows = sp.plan[2];
  if (rows > a.out_rows) {
    if (threadIdx.x == 0) set_abort(c, kCodeResourceExhausted, step);
    return;
  }
  if (blockIdx.x == 0) {
    for (uint32_t i = threadIdx.x; i < sp.lay.words(); i += blockDim.x) c.plan_copy[i] = sp.plan[i];
    for (uint32_t e = threadIdx.x; e < c.local_experts; e += blockDim.x) {
      a.out_expert_num_tokens[e] = static_cast<int32_t>(sp.plan[sp.lay.total(e)]);
    }
  }
  const uint32_t lane = threadIdx.x % 32;
  const uint32_t warps = gridDim.x * (kThreads / 32);
  for (uint32_t i = blockIdx.x * (kThreads / 32) + threadIdx.x / 32; i < sp.pairs(); i += warps) {
    uint32_t e, s, j;
    sp.find(i, e, s, j);
    const RecordLocation loc = locate_record(sp.lay, sp.plan, c.rank, c.private_tokens, c.direct != 0, s, e, j);
    const uint8_t* base = loc.where == RecordSource::kOwnSendBuffer ? c.dispatch_send
                          : loc.where == RecordSource::kRecvBuffer  ? c.dispatch_recv
                                                                    : c.peers.dispatch_send[s];
    const uint8_t* rec = base + size_t{loc.row} * c.dispatch_record;
    const uint32_t row = output_row(sp.lay, sp.plan, s, e, j);
    warp_copy(static_cast<uint8_t*>(a.out_expert_x) + size_t{row} * a.out_x_stride * c.in_size, rec, c.x_bytes, lane);
    const float* scales = reinterpret_cast<const float*>(rec + c.x_stride);
    for (uint32_t k = lane; k < c.hidden_scale; k += 32) {
      a.out_expert_x_scale[size_t{row} * a.out_scale_stride_token + size_t{k} * a.out_scale_stride_elem] = scales[k];
    }
  }
}

}  // namespace

cudaError_t launch_dispatch_recv(const Context& c, const DispatchRecvArgs& a, int sms, cudaStream_t stream) {
  const RecvPlanLayout lay{c.world, c.local_experts};
  const size_t smem = (size_t{lay.words()} + size_t{c.world} * c.local_experts + 1) * 4;
  uint32_t blocks = (a.out_rows + kThreads / 32 - 1) / (kThreads / 32);
  blocks = blocks < 1 ? 1 : (blocks > static_cast<uint32_t>(2 * sms) ? 2 * sms : blocks);
  dispatch_recv_kernel<<<blocks, kThreads, smem, stream>>>(c, a);
  return cudaGetLastError();
}

cudaError_t load_dispatch_recv() {
  cudaFuncAttributes attr;
  return cudaFuncGetAttributes(&attr, dispatch_recv_kernel);  // loads the module now (kernels.h says why)
}

}  // namespace fabric_lib::moe::kernels

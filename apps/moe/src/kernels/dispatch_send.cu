// dispatch_send: (1) one block routes — per-expert counts and stable sorted positions (the same
// order as the CPU half: by expert, then (token, k)), the route block into mapped host memory
// (proxy path) or into every peer's IPC-mapped area (direct path), then "routes ready";
// (2) every block copies the tokens expert-sorted into the send buffer — or, on the direct path,
// the first P of each peer's pairs straight into that peer's private slot — then "send ready".
#include "device_common.cuh"

namespace fabric_lib::moe::kernels {
namespace {

constexpr uint32_t kRouteThreads = 1024;
constexpr uint32_t kWarps = kRouteThreads / 32;

__device__ __forceinline__ uint32_t lanemask_lt() {
  uint32_t m;
  asm("mov.u32 %0, %%lanemask_lt;" : "=r"(m));
  return m;
}

// Writes the route block of (source c.rank, step) to `dst` with one block.
__device__ void write_route_block(const Context& c, uint8_t* dst, uint64_t step, const uint32_t* offsets,
                                  uint32_t mix_sum, uint32_t total) {
  uint32_t* counts = reinterpret_cast<uint32_t*>(dst + kRouteHeaderBytes);
  for (uint32_t e = threadIdx.x; e < c.experts; e += blockDim.x) counts[e] = offsets[e + 1] - offsets[e];
  if (threadIdx.x == 0) {
    RouteHeader h;
    h.magic = kRouteMagic;
    h.version = kRouteVersion;
    h.source = static_cast<uint16_t>(c.rank);
    h.num_experts = c.experts;
    h.total = total;
    h.step = step;
    h.checksum = route_finish(mix_sum, c.rank, step, total, c.experts);
    h.reserved = 0;
    *reinterpret_cast<RouteHeader*>(dst) = h;
  }
}

__global__ void __launch_bounds__(kRouteThreads, 1)
    route_kernel(Context c, const uint32_t* __restrict__ indices, size_t indices_stride, uint32_t num_tokens,
                 const int32_t* __restrict__ bound_m) {
  extern __shared__ uint32_t smem[];
  const uint32_t tid = threadIdx.x, warp = tid / 32, lane = tid % 32, E = c.experts, K = c.top_k;
  uint32_t* offsets = smem;                                      // [E + 1]: starts, then the total
  uint32_t* totals = smem + E + 1;                               // [E]
  uint32_t* hist = smem + 2 * E + 1;                             // [kWarps][E]
  __shared__ uint64_t step;
  __shared__ uint32_t m, bad, mix_sum;
  if (tid == 0) {
    step = c.ws->step + 1;
    int32_t b = bound_m ? *bound_m : static_cast<int32_t>(num_tokens);
    m = b < 0 ? 0u : (static_cast<uint32_t>(b) < num_tokens ? static_cast<uint32_t>(b) : num_tokens);
    bad = 0;
    mix_sum = 0;
  }
  for (uint32_t i = tid; i < kWarps * E; i += blockDim.x) hist[i] = 0;
  __syncthreads();
  // The previous step's writes from the send regions must have completed (proxy path).
  if (!c.direct && !block_wait([&] { return wait_at_least(c, control_word(c, kSendFree), step - 1, step); })) {
    if (tid == 0) c.ws->step = step;
    return;
  }
  const uint32_t pairs = m * K;
  const uint32_t per_warp = (pairs + kWarps - 1) / kWarps;
  const uint32_t begin = warp * per_warp, end = min(pairs, begin + per_warp);
  // Pass 1: each warp counts its contiguous range of pairs.
  for (uint32_t base = begin; base < end; base += 32) {
    const uint32_t i = base + lane;
    uint32_t e = UINT32_MAX;
    if (i < end) {
      e = indices[(i / K) * indices_stride + i % K];
      if (e >= E) {
        bad = 1;
        e = UINT32_MAX;
      }
    }
    const uint32_t peers = __match_any_sync(0xFFFFFFFFu, e);
    if (e != UINT32_MAX && lane == __ffs(peers) - 1) hist[warp * E + e] += __popc(peers);
    __syncwarp();
  }
  __syncthreads();
  // Per expert: exclusive prefix over the warps, and the total.
  for (uint32_t e = tid; e < E; e += blockDim.x) {
    uint32_t run = 0;
    for (uint32_t w = 0; w < kWarps; ++w) {
      const uint32_t h = hist[w * E + e];
      hist[w * E + e] = run;
      run += h;
    }
    totals[e] = run;
  }
  __syncthreads();
  // Exclusive scan of the totals over the experts (warp 0, a run of experts per lane).
  if (warp == 0) {
    const uint32_t per_lane = (E + 31) / 32;
    uint32_t local = 0;
    for (uint32_t k = 0; k < per_lane; ++k) {
      const uint32_t e = lane * per_lane + k;
      if (e < E) local += totals[e];
    }
    uint32_t incl = local;
    for (int d = 1; d < 32; d <<= 1) {
      const uint32_t v = __shfl_up_sync(0xFFFFFFFFu, incl, d);
      if (lane >= static_cast<uint32_t>(d)) incl += v;
    }
    uint32_t run = incl - local;
    for (uint32_t k = 0; k < per_lane; ++k) {
      const uint32_t e = lane * per_lane + k;
      if (e < E) {
        offsets[e] = run;
        run += totals[e];
      }
    }
    if (lane == 31) offsets[E] = incl;
  }
  __syncthreads();
  // Pass 2: stable positions. Each warp walks its pairs again: start of the expert, plus the
  // pairs of earlier warps, plus the earlier ones of this warp.
  for (uint32_t base = begin; base < end; base += 32) {
    const uint32_t i = base + lane;
    uint32_t e = UINT32_MAX;
    if (i < end) {
      e = indices[(i / K) * indices_stride + i % K];
      if (e >= E) e = UINT32_MAX;
    }
    const uint32_t peers = __match_any_sync(0xFFFFFFFFu, e);
    if (e != UINT32_MAX) {
      c.positions[i] = offsets[e] + hist[warp * E + e] + __popc(peers & lanemask_lt());
    } else if (i < end) {
      c.positions[i] = 0;  // an invalid pair: the step aborts below
    }
    __syncwarp();
    if (e != UINT32_MAX && lane == __ffs(peers) - 1) hist[warp * E + e] += __popc(peers);
    __syncwarp();
  }
  // The checksum's terms and the counts.
  uint32_t part = 0;
  for (uint32_t e = tid; e < E; e += blockDim.x) part += route_mix(e, offsets[e + 1] - offsets[e]);
  for (int d = 16; d > 0; d >>= 1) part += __shfl_down_sync(0xFFFFFFFFu, part, d);
  if (lane == 0) atomicAdd(&mix_sum, part);
  for (uint32_t e = tid; e <= E; e += blockDim.x) c.expert_offset[e] = offsets[e];
  __syncthreads();
  const uint32_t total = offsets[E];
  const uint32_t parity = route_parity(step);
  if (c.direct) {
    const DirectAreaLayout lay{c.world, c.route_block};
    for (uint32_t r = 0; r < c.world; ++r) {
      write_route_block(c, c.peers.area[r] + lay.block_offset(parity, c.rank), step, offsets, mix_sum, total);
    }
    __threadfence_system();
    __syncthreads();
    if (tid == 0) {
      __threadfence_system();
      for (uint32_t r = 0; r < c.world; ++r) {
        store_release(reinterpret_cast<uint64_t*>(direct_flag(c, r, kFlagRoutes, c.rank)), step);
      }
    }
  } else {
    write_route_block(c, c.route_send + size_t{parity} * c.route_block, step, offsets, mix_sum, total);
    __threadfence_system();
    __syncthreads();
    if (tid == 0) {
      __threadfence_system();
      store_release(control_word(c, kRoutesReadyGpuNs), globaltimer_ns());
      store_release(control_word(c, kRoutesReady), step);
    }
  }
  if (tid == 0) {
    c.ws->step = step;
    c.ws->tokens = m;
    if (bad) set_abort(c, kCodeInvalidArgument, step);
  }
}

constexpr uint32_t kCopyThreads = 256;

__global__ void __launch_bounds__(kCopyThreads)
    copy_tokens_kernel(Context c, DispatchSendArgs a) {
  const uint64_t step = c.ws->step;
  const uint32_t m = c.ws->tokens, K = c.top_k, L = c.local_experts;
  const uint32_t lane = threadIdx.x % 32;
  const uint32_t warp = blockIdx.x * (kCopyThreads / 32) + threadIdx.x / 32;
  const uint32_t warps = gridDim.x * (kCopyThreads / 32);
  if (!aborted(c)) {
    for (uint32_t p = warp; p < m * K; p += warps) {
      const uint32_t tok = p / K, k = p % K;
      const uint32_t e = a.indices[tok * a.indices_stride + k];
      if (e >= c.experts) continue;
      const uint32_t pos = c.positions[p];
      const uint32_t r = e / L;
      const uint32_t q = pos - c.expert_offset[r * L];
      uint8_t* dst;
      if (c.direct && r != c.rank && q < c.private_tokens) {
        dst = c.peers.dispatch_recv[r] + (size_t{c.rank} * c.private_tokens + q) * c.dispatch_record;
      } else {
        dst = c.dispatch_send + size_t{pos} * c.dispatch_record;
      }
      const uint8_t* src = static_cast<const uint8_t*>(a.x) + size_t{tok} * a.x_stride * c.in_size;
      warp_copy(dst, src, c.x_bytes, lane);
      float* scales = reinterpret_cast<float*>(dst + c.x_stride);
      for (uint32_t i = lane; i < c.hidden_scale; i += 32) {
        scales[i] = a.x_scale[size_t{tok} * a.x_scale_stride_token + size_t{i} * a.x_scale_stride_elem];
      }
    }
  }
  if (last_block_done(c.ws)) {
    if (c.direct) {
      for (uint32_t r = 0; r < c.world; ++r) {
        if (r != c.rank) store_release(reinterpret_cast<uint64_t*>(direct_flag(c, r, kFlagTokens, c.rank)), step);
      }
    } else {
      store_release(control_word(c, kSendReady), step);
    }
  }
}

}  // namespace

size_t route_kernel_smem(uint32_t experts) { return (2 * size_t{experts} + 1 + size_t{kWarps} * experts) * 4; }

cudaError_t prepare_kernels(uint32_t experts) {
  cudaError_t e = cudaFuncSetAttribute(route_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(route_kernel_smem(experts)));
  cudaFuncAttributes attr;
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&attr, copy_tokens_kernel);  // loads the module
  if (e == cudaSuccess) e = load_dispatch_recv();
  if (e == cudaSuccess) e = load_combine_send();
  if (e == cudaSuccess) e = load_combine_recv();
  return e;
}

cudaError_t launch_dispatch_send(const Context& c, const DispatchSendArgs& a, int sms, cudaStream_t stream) {
  const size_t smem = route_kernel_smem(c.experts);
  route_kernel<<<1, kRouteThreads, smem, stream>>>(c, a.indices, a.indices_stride, a.num_tokens, a.bound_m);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  const uint32_t pairs = a.num_tokens * c.top_k;
  uint32_t blocks = (pairs + kCopyThreads / 32 - 1) / (kCopyThreads / 32);
  blocks = blocks < 1 ? 1 : (blocks > static_cast<uint32_t>(2 * sms) ? 2 * sms : blocks);
  copy_tokens_kernel<<<blocks, kCopyThreads, 0, stream>>>(c, a);
  return cudaGetLastError();
}

}  // namespace fabric_lib::moe::kernels

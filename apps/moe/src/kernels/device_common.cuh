// Device helpers of the MoE kernels: system-scope flag accesses (the other side is the host
// proxy, the engine or a peer GPU), bounded waits that honour the abort word, the step's plan in
// shared memory, and row copies.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "fabric_lib/device/flags.cuh"
#include "kernels.h"

namespace fabric_lib::moe::kernels {

using fabric_lib::device::globaltimer_ns;
using fabric_lib::device::load_acquire;
using fabric_lib::device::store_release;

// fabric_lib::ErrorCode values the kernels report (status.h).
inline constexpr uint64_t kCodeInvalidArgument = 1;
inline constexpr uint64_t kCodeResourceExhausted = 5;
inline constexpr uint64_t kCodeMalformed = 6;
inline constexpr uint64_t kCodeCancelled = 9;
inline constexpr uint64_t kCodeDeadlineExceeded = 10;

__device__ __forceinline__ uint64_t* control_word(const Context& c, uint32_t w) { return c.control + size_t{w} * 8; }

// Sets the abort word unless it is set (the host proxy may have set it first). A plain store, not
// an atomic: device atomics on mapped host memory need host-native atomics, which PCIe hosts
// lack. Two racing aborts both leave a nonzero word, which is all a waiter needs.
__device__ __forceinline__ void set_abort(const Context& c, uint64_t code, uint64_t step) {
  uint64_t* w = control_word(c, kAbort);
  if (load_acquire(w) == 0) store_release(w, (code << 32) | (step & 0xFFFFFFFFull));
}

__device__ __forceinline__ bool aborted(const Context& c) { return load_acquire(control_word(c, kAbort)) != 0; }

// One thread waits until *word >= target. False when the step is aborted (by anyone), the
// engine reported the expectation failed, or the wait outlived the timeout (then it aborts).
__device__ inline bool wait_at_least(const Context& c, const uint64_t* word, uint64_t target, uint64_t step) {
  const uint64_t start = globaltimer_ns();
  while (true) {
    const uint64_t v = load_acquire(word);
    if (v == kWordFailed) {
      set_abort(c, kCodeCancelled, step);
      return false;
    }
    if (v >= target) return true;
    if (aborted(c)) return false;
    if (globaltimer_ns() - start > c.timeout_ns) {
      set_abort(c, kCodeDeadlineExceeded, step);
      return false;
    }
    __nanosleep(128);
  }
}

// Block-wide: thread 0 runs `wait` (returning bool), everyone gets the answer.
template <typename Wait>
__device__ __forceinline__ bool block_wait(Wait wait) {
  __shared__ int ok;
  if (threadIdx.x == 0) ok = wait() ? 1 : 0;
  __syncthreads();
  const bool r = ok != 0;
  __syncthreads();
  return r;
}

__device__ __forceinline__ uint8_t* direct_flag(const Context& c, uint32_t owner, uint32_t kind, uint32_t source) {
  const DirectAreaLayout lay{c.world, c.route_block};
  return c.peers.area[owner] + lay.flag_offset(kind, source);
}

// Copies `bytes` with one warp: 16-byte accesses when both sides allow them.
__device__ __forceinline__ void warp_copy(uint8_t* dst, const uint8_t* src, uint32_t bytes, uint32_t lane) {
  if (((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) & 15) == 0) {
    const uint32_t n16 = bytes / 16;
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(dst);
    for (uint32_t i = lane; i < n16; i += 32) d[i] = s[i];
    for (uint32_t i = n16 * 16 + lane; i < bytes; i += 32) dst[i] = src[i];
  } else {
    for (uint32_t i = lane; i < bytes; i += 32) dst[i] = src[i];
  }
}

// The step's receive plan in shared memory, plus the prefix over (expert, source) of the pair
// counts so that a flat pair index finds its (e, s, j) by binary search.
struct SharedPlan {
  RecvPlanLayout lay;
  uint32_t* plan;    // lay.words()
  uint32_t* prefix;  // W * L + 1: prefix[e * W + s] = pairs before (e, s)

  __device__ static size_t bytes(const Context& c) {
    const RecvPlanLayout l{c.world, c.local_experts};
    return (size_t{l.words()} + size_t{c.world} * c.local_experts + 1) * 4;
  }
  // Call with all threads after plan[] is filled.
  __device__ void build_prefix() {
    if (threadIdx.x == 0) {
      uint32_t run = 0;
      for (uint32_t e = 0; e < lay.local_experts; ++e) {
        for (uint32_t s = 0; s < lay.world; ++s) {
          prefix[e * lay.world + s] = run;
          run += plan[lay.cnt(s, e)];
        }
      }
      prefix[lay.local_experts * lay.world] = run;
    }
    __syncthreads();
  }
  __device__ uint32_t pairs() const { return prefix[lay.local_experts * lay.world]; }
  // Pair i -> (e, s, j).
  __device__ void find(uint32_t i, uint32_t& e, uint32_t& s, uint32_t& j) const {
    uint32_t lo = 0, hi = lay.local_experts * lay.world;  // prefix[lo] <= i < prefix[hi]
    while (hi - lo > 1) {
      const uint32_t mid = (lo + hi) / 2;
      if (prefix[mid] <= i) lo = mid; else hi = mid;
    }
    e = lo / lay.world;
    s = lo % lay.world;
    j = i - prefix[lo];
  }
};

// Direct path: builds this rank's receive plan for `step` from the route blocks the peers stored
// in this rank's area — the same values as build_recv_plan() (layout.h) on the host, computed by
// the whole block. Returns false (and aborts) when a block is malformed; every block calls it.
__device__ inline bool build_plan_from_area(const Context& c, uint64_t step, SharedPlan& sp) {
  const RecvPlanLayout& lay = sp.lay;
  const uint32_t W = c.world, L = c.local_experts, E = c.experts, me = c.rank;
  const DirectAreaLayout area{W, c.route_block};
  const uint32_t parity = route_parity(step);
  uint32_t* plan = sp.plan;
  __shared__ uint32_t sums[kMaxDirectWorld];
  __shared__ int malformed;
  if (threadIdx.x < W) {
    plan[lay.rank_off(threadIdx.x)] = 0;
    sums[threadIdx.x] = 0;
  }
  if (threadIdx.x == 0) malformed = 0;
  __syncthreads();
  for (uint32_t idx = threadIdx.x; idx < W * E; idx += blockDim.x) {
    const uint32_t s = idx / E, e = idx % E;
    const uint8_t* block = c.peers.area[me] + area.block_offset(parity, s);
    const uint32_t v = reinterpret_cast<const uint32_t*>(block + kRouteHeaderBytes)[e];
    atomicAdd(&sums[s], v);
    if (e < me * L) {
      atomicAdd(&plan[lay.rank_off(s)], v);
    } else if (e < (me + 1) * L) {
      plan[lay.cnt(s, e - me * L)] = v;
    }
  }
  __syncthreads();
  if (threadIdx.x < W) {
    const RouteHeader* h = reinterpret_cast<const RouteHeader*>(c.peers.area[me] + area.block_offset(parity, threadIdx.x));
    if (h->magic != kRouteMagic || h->version != kRouteVersion || h->source != threadIdx.x || h->step != step ||
        h->num_experts != E || h->total != sums[threadIdx.x] || h->total > c.max_pairs) {
      malformed = 1;
    }
  }
  __syncthreads();
  if (malformed) {
    if (threadIdx.x == 0) set_abort(c, kCodeMalformed, step);
    return false;
  }
  if (threadIdx.x == 0) finish_recv_plan(lay, me, c.private_tokens, c.padding, step, plan);
  __syncthreads();
  return true;
}

// Grid-wide "last block done": every block calls it after its writes; true in exactly one
// thread 0 of the last block, after every block's writes are visible system-wide.
__device__ __forceinline__ bool last_block_done(Workspace* ws) {
  __shared__ int last;
  __threadfence_system();  // each thread's own writes (peer memory, mapped memory) first
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence_system();
    const uint32_t prev = atomicAdd(&ws->blocks_done, 1u);
    last = prev == gridDim.x - 1;
    if (last) {
      ws->blocks_done = 0;  // for the next launch (stream order)
      __threadfence_system();
    }
  }
  __syncthreads();
  return threadIdx.x == 0 && last;
}

}  // namespace fabric_lib::moe::kernels

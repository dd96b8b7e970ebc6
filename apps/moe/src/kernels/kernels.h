// The CUDA kernels' interface (CUDA builds): what a launch needs — the geometry, this rank's
// device pointers, the mapped control words and plans, and for Path::kDirect the peers'
// CUDA-IPC-mapped buffers — and the four launchers (dispatch send/recv, combine send/recv).
// Plain C++17 so both nvcc and the host code include it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "fabric_lib/moe/args.h"
#include "fabric_lib/moe/layout.h"

namespace fabric_lib::moe::kernels {

// Path::kDirect: every rank of one host, at most this many.
inline constexpr uint32_t kMaxDirectWorld = 8;
// The routing kernel keeps a per-warp histogram of experts in shared memory (32 x E x 4 bytes).
inline constexpr uint32_t kMaxGpuExperts = 512;

// The area each rank owns in device memory for the direct path, written by its peers over IPC:
// three flags per source (routes, tokens, combine results; one 64-byte line each), then the
// double-buffered route blocks [parity][source].
struct DirectAreaLayout {
  uint32_t world = 0;
  size_t route_block = 0;
  FL_MOE_HD size_t flag_offset(uint32_t kind, uint32_t source) const { return (size_t{kind} * world + source) * 64; }
  FL_MOE_HD size_t blocks_offset() const { return round_up(3ull * world * 64, 4096); }
  FL_MOE_HD size_t block_offset(uint32_t parity, uint32_t source) const {
    return blocks_offset() + (size_t{parity} * world + source) * route_block;
  }
  FL_MOE_HD size_t bytes() const { return blocks_offset() + 2ull * world * route_block; }
};
enum DirectFlag : uint32_t { kFlagRoutes = 0, kFlagTokens = 1, kFlagCombine = 2 };

struct DirectPeers {
  uint8_t* area[kMaxDirectWorld] = {};           // each rank's DirectArea (this rank's own at [rank])
  uint8_t* dispatch_recv[kMaxDirectWorld] = {};  // private slots are written there
  uint8_t* dispatch_send[kMaxDirectWorld] = {};  // pairs past P are pulled from there
  uint8_t* combine_recv[kMaxDirectWorld] = {};   // combine results are stored there
};

// Device memory of one rank beside the regions.
struct Workspace {
  uint64_t step;         // the step of the last dispatch_send (the device's step counter)
  uint32_t tokens;       // valid tokens of that step (bound_m applied)
  uint32_t blocks_done;  // last-block-done counter of the copy kernels (each resets it)
  uint32_t bad_input;    // set when an index names no expert
  uint32_t pad[11];
};

struct Context {
  // geometry (config.h Geometry)
  uint32_t world, rank, experts, local_experts, top_k, max_tokens, private_tokens, padding;
  uint32_t hidden, hidden_scale, in_size, out_size;
  uint32_t x_bytes, x_stride, dispatch_record, combine_record;
  uint32_t route_block, max_pairs, out_fp32, direct;
  uint64_t timeout_ns;      // a wait longer than this aborts the step (the proxy's deadline comes first)
  // this rank (device pointers)
  uint8_t* route_send;      // mapped host
  uint8_t* dispatch_send;
  uint8_t* dispatch_recv;
  uint8_t* combine_send;
  uint8_t* combine_recv;
  uint64_t* control;        // mapped host: word w at control[w * 8]
  uint32_t* plans;          // mapped host: the two receive plans after the words
  Workspace* ws;
  uint32_t* positions;      // M * K
  uint32_t* expert_offset;  // E + 1
  uint32_t* plan_copy;      // this step's plan in device memory (dispatch_recv -> combine_send)
  DirectPeers peers;
};

// Grid sizes come from host-known bounds (num_tokens, out_rows), never from bound_m, so that a
// CUDA graph captured once replays for any valid token count.
cudaError_t launch_dispatch_send(const Context& c, const DispatchSendArgs& a, int sms, cudaStream_t stream);
cudaError_t launch_dispatch_recv(const Context& c, const DispatchRecvArgs& a, int sms, cudaStream_t stream);
cudaError_t launch_combine_send(const Context& c, const CombineSendArgs& a, int sms, cudaStream_t stream);
cudaError_t launch_combine_recv(const Context& c, const CombineRecvArgs& a, int sms, cudaStream_t stream);

// Shared memory the routing kernel needs for E experts, and the one-time kernel set-up (the
// routing kernel's shared-memory limit; not a stream operation, so done before any capture).
// prepare_kernels also loads every kernel of this folder into the current device's context:
// CUDA 12+ loads modules lazily at a kernel's first launch, and a lazy load waits for the
// kernels already running in the context — a first launch while dispatch_recv spins waiting
// for peers would wait for it (docs/gpu.md, "Lazy loading").
size_t route_kernel_smem(uint32_t experts);
cudaError_t prepare_kernels(uint32_t experts);
cudaError_t load_dispatch_recv();
cudaError_t load_combine_send();
cudaError_t load_combine_recv();

}  // namespace fabric_lib::moe::kernels

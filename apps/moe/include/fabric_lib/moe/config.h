// MoE dispatch/combine configuration: the shapes and dtypes of one all-to-all, its expert
// parallelism, the speculative private slots and the overflow capacity, and the buffer sizes that
// follow from them (the memory formula of docs/moe.md).
//
// Every rank of one all-to-all must use an equal configuration apart from `rank` (connect()
// compares a fingerprint of it). Validation returns InvalidArgument with the offending field.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "fabric_lib/idle_policy.h"
#include "fabric_lib/status.h"

namespace fabric_lib::moe {

// Element types of tokens (in), scales and outputs. kFp8E4M3 tokens are moved as bytes.
enum class DType : uint8_t { kFp8E4M3 = 1, kBf16 = 2, kFp16 = 3, kFp32 = 4 };
size_t dtype_size(DType t);
const char* dtype_name(DType t);

// How tokens reach the other ranks.
enum class Path : uint8_t {
  // Everything through the TransferEngine and the host proxy: routing counts by a prepared
  // PeerGroup scatter, tokens speculatively into private slots then overflow writes, combine
  // results by one scatter. Works between hosts and on CPU ranks.
  kProxy = 1,
  // Every rank on one host (GPU only): kernels store counts, flags, private tokens and combine
  // results straight into the peers' CUDA-IPC-mapped buffers and pull the rest from the senders'
  // send buffers; the engine carries nothing.
  kDirect = 2,
};

// Sentinel for MoeConfig::overflow_tokens and max_private_tokens: compute the default.
inline constexpr uint32_t kAuto = UINT32_MAX;
// Largest expert parallelism we accept (the route exchange scales as world^2 blocks).
inline constexpr uint32_t kMaxWorldSize = 1024;

struct MoeConfig {
  uint32_t max_num_tokens = 0;     // M: tokens per rank per step (bound_m may be less)
  uint32_t num_experts = 0;        // E, divisible by world_size
  uint32_t experts_per_token = 0;  // K (top-k), 1..64
  uint32_t hidden_dim = 0;         // H
  uint32_t hidden_dim_scale = 0;   // S: fp32 scales per token (H / 128 for per-128 fp8), 0 = none
  DType in_dtype = DType::kBf16;   // dispatched tokens
  DType out_dtype = DType::kBf16;  // expert outputs and combined tokens (kBf16 or kFp32)
  uint32_t expert_padding = 1;     // each expert's rows in the receive layout start at a multiple
  uint32_t world_size = 1;         // W
  uint32_t rank = 0;
  // P: tokens each peer may send into this rank's private slot before the routes are known.
  // kAuto: ceil(M*K/E) * 1.2 (rounded down) * experts per rank, as pplx-garden does.
  uint32_t max_private_tokens = kAuto;
  // C: receive rows beyond the private slots (what peers send past P), shared by all sources.
  // kAuto: the worst case (W-1) * max(0, M*min(K, L) - P), which never fails. A smaller C saves
  // memory; a step whose routing needs more fails on every rank with ResourceExhausted.
  uint32_t overflow_tokens = kAuto;
  Path path = Path::kProxy;
  // Imm values base .. base+2 (routes, tokens, combine) of the engine's namespace.
  uint32_t imm_base = 0x4D4F0000;
  // A step that waits longer than this for a peer ends with DeadlineExceeded on this rank.
  std::chrono::milliseconds step_timeout{10000};
  // CPU of the host proxy thread (-1: not pinned).
  int proxy_cpu = -1;
  // kSpin: the proxy polls continuously (GPU ranks in production and benchmarks: lowest reaction
  // time, one busy core). kAdaptive: GPU ranks spin 200 us after progress, then poll every ~20 us;
  // CPU ranks always sleep on a doorbell that every change rings.
  IdlePolicy proxy_idle = IdlePolicy::kAdaptive;

  Status validate() const;
  // A hash of every field peers must agree on (all but rank, proxy_cpu and proxy_idle).
  uint64_t fingerprint() const;
  std::string to_string() const;
};

// Sizes derived from a valid configuration. All record sizes are multiples of 16 bytes.
struct Geometry {
  uint32_t world = 0, rank = 0;
  uint32_t experts = 0, local_experts = 0, top_k = 0;
  uint32_t max_tokens = 0, private_tokens = 0, overflow_tokens = 0, padding = 1;
  uint32_t hidden = 0, hidden_scale = 0;
  size_t in_size = 0, out_size = 0;
  size_t x_bytes = 0;           // H * in_size
  size_t x_stride = 0;          // x_bytes rounded up to 16: where the scales start in a record
  size_t scale_bytes = 0;       // S * 4
  size_t dispatch_record = 0;   // Td: x, then scales
  size_t combine_record = 0;    // Tc: H * out_size rounded up to 16
  size_t route_block = 0;       // one routing-count block (header + E counts), 64-byte multiple
  uint32_t max_pairs = 0;       // M * K (token, expert) pairs a rank sends
  uint32_t max_pairs_per_rank = 0;  // M * min(K, L): what one source can send one destination
  uint32_t recv_slots = 0;      // W * P + C rows of the dispatch receive buffer
  uint32_t combine_stage_rows = 0;  // (W-1) * P + C rows staged for combine writes
  uint32_t max_recv_tokens = 0;     // rows the expert-contiguous output may need (padded)
  Path path = Path::kProxy;

  static Geometry from(const MoeConfig& c);  // c must be valid
};

// Bytes of each region one rank allocates (docs/moe.md, "Buffers").
struct BufferPlan {
  size_t route_send = 0;      // 2 * route_block                      (host, local)
  size_t route_recv = 0;      // 2 * W * route_block                  (host; device for kDirect)
  size_t dispatch_send = 0;   // M * K * Td
  size_t dispatch_recv = 0;   // (W * P + C) * Td   (kDirect: W * P * Td)
  size_t combine_send = 0;    // ((W-1) * P + C) * Tc (kDirect: 0, results are stored in place)
  size_t combine_recv = 0;    // M * K * Tc
  size_t control = 0;         // flags and the per-step receive plan (host, GPU-mapped)
  size_t workspace = 0;       // per-token positions (M * K * 4) and the device step counter

  static BufferPlan from(const Geometry& g);
  size_t total() const;
  // One line per region plus the total, with the formula and the numbers used.
  std::string describe(const Geometry& g) const;
};

}  // namespace fabric_lib::moe

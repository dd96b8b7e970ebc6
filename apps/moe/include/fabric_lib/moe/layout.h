// The byte layouts every half of dispatch/combine agrees on — the CPU halves, the CUDA kernels
// and the host proxy include this one header (plain C++17 that nvcc compiles too).
//
//  - Routing-count block (one per source and step): a 32-byte RouteHeader, then E u32 counts.
//    Written by dispatch_send into the route-send region, scattered to every peer's route-receive
//    region at slot [parity][source], validated by the receiver (wire.h) before use.
//  - Sorted order of a sender: its (token, k) pairs sorted by expert, stable in (token, k) order.
//    Pair (t, k) with expert e sits at row expert_offset[e] + (its index among e's pairs); the
//    pairs for rank r's experts are the contiguous rows [rank_off(r), rank_off(r) + n(r)).
//  - Receive plan (RecvPlanLayout): what rank r needs from all W blocks to place its tokens, as
//    u32 words, built by build_recv_plan() on the host (proxy path) or on the GPU (direct path).
//  - Receive layout of rank r: the pairs for its local expert e, ordered by source rank, then in
//    the source's sorted order, start at pad_off(e) (a multiple of the expert padding).
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define FL_MOE_HD __host__ __device__ __forceinline__
#else
#define FL_MOE_HD inline
#endif

namespace fabric_lib::moe {

FL_MOE_HD constexpr uint64_t round_up(uint64_t x, uint64_t m) { return (x + m - 1) / m * m; }

// --- routing-count block ---------------------------------------------------------------------
inline constexpr uint32_t kRouteMagic = 0x524D4C46;  // "FLMR" little endian
inline constexpr uint16_t kRouteVersion = 1;
inline constexpr size_t kRouteHeaderBytes = 32;

struct RouteHeader {
  uint32_t magic;
  uint16_t version;
  uint16_t source;
  uint32_t num_experts;
  uint32_t total;      // sum of the counts
  uint64_t step;       // 1, 2, ...
  uint32_t checksum;   // route_checksum()
  uint32_t reserved;   // 0
};
static_assert(sizeof(RouteHeader) == kRouteHeaderBytes, "RouteHeader is 32 bytes");

FL_MOE_HD constexpr size_t route_block_bytes(uint32_t experts) { return round_up(kRouteHeaderBytes + 4ull * experts, 64); }

// The checksum is a sum of per-count terms (so a GPU computes it with a parallel reduction),
// finished with the header fields.
FL_MOE_HD uint32_t route_mix(uint32_t index, uint32_t count) {
  return (count + 1u) * (2u * index + 1u) * 0x9E3779B1u;
}
FL_MOE_HD uint32_t route_finish(uint32_t mix_sum, uint32_t source, uint64_t step, uint32_t total, uint32_t experts) {
  uint32_t h = mix_sum ^ 0x811C9DC5u;
  h ^= static_cast<uint32_t>(step) * 0x85EBCA77u;
  h ^= static_cast<uint32_t>(step >> 32) * 0xC2B2AE3Du;
  h ^= (source + 1u) * 0x27D4EB2Fu;
  h ^= total * 0x165667B1u;
  h ^= experts * 0xD3A2646Cu;
  return h;
}

// Which half of the double-buffered route regions step `step` uses.
FL_MOE_HD constexpr uint32_t route_parity(uint64_t step) { return static_cast<uint32_t>(step & 1); }
// Byte offset of (parity, source)'s block in a route-receive region.
FL_MOE_HD constexpr size_t route_recv_offset(uint32_t parity, uint32_t source, uint32_t world, size_t block) {
  return (static_cast<size_t>(parity) * world + source) * block;
}

// --- receive plan ----------------------------------------------------------------------------
// Words of the plan of rank r for one step, for W sources and L local experts:
//   header: [0] step low, [1] step high, [2] padded rows, [3] received pairs, [4] overflow rows used
//   cnt(s, e)    pairs source s sent for local expert e
//   blk(s, e)    sum over e' < e of cnt(s, e'): where e starts in s's block for r
//   start(s, e)  sum over s' < s of cnt(s', e): where s starts within e's rows
//   ov_off(s)    overflow row (after the W*P private rows) where s's pairs past P start
//   rank_off(s)  where r's block starts in s's sorted order (r's combine results go there)
//   stage_off(s) where s's combine results start in r's combine-staging region
//   sent(s)      pairs s sent to r
//   pad_off(e)   first row of local expert e in the padded receive layout
//   total(e)     pairs for local expert e
inline constexpr uint32_t kPlanHeaderWords = 8;

struct RecvPlanLayout {
  uint32_t world = 0;
  uint32_t local_experts = 0;

  FL_MOE_HD uint32_t words() const { return kPlanHeaderWords + 3 * world * local_experts + 4 * world + 2 * local_experts; }
  FL_MOE_HD uint32_t cnt(uint32_t s, uint32_t e) const { return kPlanHeaderWords + s * local_experts + e; }
  FL_MOE_HD uint32_t blk(uint32_t s, uint32_t e) const { return kPlanHeaderWords + (world + s) * local_experts + e; }
  FL_MOE_HD uint32_t start(uint32_t s, uint32_t e) const {
    return kPlanHeaderWords + (2 * world + s) * local_experts + e;
  }
  FL_MOE_HD uint32_t per_source(uint32_t which, uint32_t s) const {
    return kPlanHeaderWords + 3 * world * local_experts + which * world + s;
  }
  FL_MOE_HD uint32_t ov_off(uint32_t s) const { return per_source(0, s); }
  FL_MOE_HD uint32_t rank_off(uint32_t s) const { return per_source(1, s); }
  FL_MOE_HD uint32_t stage_off(uint32_t s) const { return per_source(2, s); }
  FL_MOE_HD uint32_t sent(uint32_t s) const { return per_source(3, s); }
  FL_MOE_HD uint32_t pad_off(uint32_t e) const { return kPlanHeaderWords + 3 * world * local_experts + 4 * world + e; }
  FL_MOE_HD uint32_t total(uint32_t e) const {
    return kPlanHeaderWords + 3 * world * local_experts + 4 * world + local_experts + e;
  }
};

// Completes a plan whose cnt(s, e) and rank_off(s) words are filled: every prefix (blk, start,
// pad_off), the per-source words (sent, ov_off, stage_off), the totals and the header. The GPU's
// direct path fills those two with a whole block and calls this from one thread; the host calls
// build_recv_plan below. `private_tokens` is P.
FL_MOE_HD void finish_recv_plan(const RecvPlanLayout& lay, uint32_t rank, uint32_t private_tokens, uint32_t padding,
                                uint64_t step, uint32_t* plan) {
  const uint32_t W = lay.world, L = lay.local_experts;
  uint32_t received = 0, overflow = 0, stage = 0;
  for (uint32_t s = 0; s < W; ++s) {
    uint32_t in_block = 0;
    for (uint32_t e = 0; e < L; ++e) {
      plan[lay.blk(s, e)] = in_block;
      in_block += plan[lay.cnt(s, e)];
    }
    plan[lay.sent(s)] = in_block;
    plan[lay.ov_off(s)] = overflow;
    plan[lay.stage_off(s)] = stage;
    if (s != rank) {
      overflow += in_block > private_tokens ? in_block - private_tokens : 0;
      stage += in_block;
    }
    received += in_block;
  }
  uint32_t rows = 0;
  for (uint32_t e = 0; e < L; ++e) {
    uint32_t start = 0;
    for (uint32_t s = 0; s < W; ++s) {
      plan[lay.start(s, e)] = start;
      start += plan[lay.cnt(s, e)];
    }
    plan[lay.pad_off(e)] = rows;
    plan[lay.total(e)] = start;
    rows += static_cast<uint32_t>(round_up(start, padding));
  }
  plan[0] = static_cast<uint32_t>(step);
  plan[1] = static_cast<uint32_t>(step >> 32);
  plan[2] = rows;
  plan[3] = received;
  plan[4] = overflow;
  plan[5] = plan[6] = plan[7] = 0;
}

// Fills `plan` (layout.words() words) for rank `rank` from count(s, expert) — the validated
// counts of every source's block (global expert index). Every sum is bounded by the caller's
// validation (counts <= M*K per source), so nothing overflows 32 bits for W * M * K < 2^32.
template <typename CountFn>
FL_MOE_HD void build_recv_plan(const RecvPlanLayout& lay, uint32_t rank, uint32_t private_tokens, uint32_t padding,
                               uint64_t step, CountFn count, uint32_t* plan) {
  const uint32_t W = lay.world, L = lay.local_experts;
  for (uint32_t s = 0; s < W; ++s) {
    uint32_t before = 0;
    for (uint32_t e = 0; e < rank * L; ++e) before += count(s, e);
    plan[lay.rank_off(s)] = before;
    for (uint32_t e = 0; e < L; ++e) plan[lay.cnt(s, e)] = count(s, rank * L + e);
  }
  finish_recv_plan(lay, rank, private_tokens, padding, step, plan);
}

// Where the j-th pair of source s for local expert e is read from by dispatch_recv.
enum class RecordSource : uint8_t { kOwnSendBuffer, kRecvBuffer, kPeerSendBuffer };
struct RecordLocation {
  RecordSource where;
  uint32_t row;  // in that buffer
};
// `direct`: Path::kDirect (pairs past P are pulled from the sender's send buffer).
FL_MOE_HD RecordLocation locate_record(const RecvPlanLayout& lay, const uint32_t* plan, uint32_t rank,
                                       uint32_t private_tokens, bool direct, uint32_t s, uint32_t e, uint32_t j) {
  const uint32_t q = plan[lay.blk(s, e)] + j;
  if (s == rank) return {RecordSource::kOwnSendBuffer, plan[lay.rank_off(s)] + q};
  if (q < private_tokens) return {RecordSource::kRecvBuffer, s * private_tokens + q};
  if (direct) return {RecordSource::kPeerSendBuffer, plan[lay.rank_off(s)] + q};
  return {RecordSource::kRecvBuffer, lay.world * private_tokens + plan[lay.ov_off(s)] + (q - private_tokens)};
}

// Row of that pair in the padded, expert-contiguous output.
FL_MOE_HD uint32_t output_row(const RecvPlanLayout& lay, const uint32_t* plan, uint32_t s, uint32_t e, uint32_t j) {
  return plan[lay.pad_off(e)] + plan[lay.start(s, e)] + j;
}

// --- control words -----------------------------------------------------------------------------
// 64-bit words shared by the halves (kernels or CPU), the proxy and the engine's sinks, one per
// 64-byte line, in mapped pinned host memory on GPU ranks. Step-valued words hold the last step
// (1, 2, ...) the event happened for; kWordFailed (the engine sinks' error value) means the
// expectation ended in error.
enum ControlWord : uint32_t {
  kRoutesReady = 0,    // dispatch_send: the route block of step t is in the route-send region
  kSendReady,          // dispatch_send: tokens of step t are in the send buffer
  kSendFree,           // proxy: every write of step t from the dispatch/route send regions completed
  kPlanReady,          // proxy: the receive plan of step t is published (and validated)
  kRouteRound,         // engine: all W-1 route blocks of step t arrived
  kDispatchRound,      // engine: all token writes of step t arrived
  kCombineReady,       // combine_send: results of step t are staged
  kCombineFree,        // proxy: every combine write of step t completed
  kCombineRound,       // engine: all combine writes of step t arrived
  kAbort,              // proxy or a kernel: nonzero = (ErrorCode << 32) | step; everyone stops
  kRoutesReadyGpuNs,   // dispatch_send: GPU globaltimer when it set kRoutesReady (benchmarks)
  kProxySeenRoutes,    // proxy: step whose kRoutesReady it has seen (benchmarks' round trip)
  kNumControlWords,
};
inline constexpr size_t kControlLineBytes = 64;
inline constexpr uint64_t kWordFailed = UINT64_MAX;

FL_MOE_HD constexpr size_t control_offset(uint32_t word) { return word * kControlLineBytes; }
// Two receive plans (by step parity) follow the control words.
FL_MOE_HD constexpr size_t plan_region_offset() { return kNumControlWords * kControlLineBytes; }
FL_MOE_HD size_t control_region_bytes(const RecvPlanLayout& lay) {
  return round_up(plan_region_offset() + 2ull * lay.words() * 4, 4096);
}

}  // namespace fabric_lib::moe

// Routing on the host: a sender's per-expert counts and sorted positions (what dispatch_send
// computes), and the step plan the proxy derives from every rank's counts — what this rank sends
// each peer (private, then overflow), where its received pairs go, the combine writes, and the
// capacity check that every rank evaluates identically.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "fabric_lib/moe/config.h"
#include "fabric_lib/moe/layout.h"
#include "fabric_lib/status.h"

namespace fabric_lib::moe {

// The sender's side of one step: counts per expert and the row of every (token, k) pair in the
// sorted order (layout.h), stable in (token, k) order.
struct LocalRouting {
  std::vector<uint32_t> counts;          // E
  std::vector<uint32_t> expert_offset;   // E + 1: exclusive prefix of counts
  std::vector<uint32_t> position;        // tokens * K: row of pair (t, k)

  // rows of rank r's experts in the sorted order: [rank_begin(r), rank_begin(r) + rank_count(r))
  uint32_t rank_begin(const Geometry& g, uint32_t r) const { return expert_offset[r * g.local_experts]; }
  uint32_t rank_count(const Geometry& g, uint32_t r) const {
    return expert_offset[(r + 1) * g.local_experts] - expert_offset[r * g.local_experts];
  }
};

// `indices` holds tokens rows of K expert ids, row t at indices[t * stride]. InvalidArgument when
// tokens > M or an id is >= E.
Result<LocalRouting> route_tokens(const Geometry& g, const uint32_t* indices, size_t stride, uint32_t tokens);

// What this rank writes to peer r in one step (proxy path). Rows are dispatch records.
struct PeerSend {
  uint32_t peer = 0;
  uint32_t count = 0;          // pairs for r's experts
  uint32_t src_row = 0;        // first of them in the send buffer
  uint32_t private_count = 0;  // min(count, P): into r's slot for this rank, row rank * P
  uint32_t overflow_count = 0; // the rest, into r's overflow rows from overflow_row
  uint32_t overflow_row = 0;   // W * P + (overflow of the sources before this one at r)
};

// A combine write of this rank to peer s: the staged results of s's pairs.
struct PeerCombine {
  uint32_t peer = 0;
  uint32_t count = 0;      // pairs (combine records)
  uint32_t stage_row = 0;  // first staged row here
  uint32_t dst_row = 0;    // first row in s's combine-receive region (s's sorted order)
};

// Everything the proxy derives from the W count vectors of one step.
struct StepPlan {
  uint64_t step = 0;
  std::vector<uint32_t> recv_plan;   // RecvPlanLayout words for this rank
  std::vector<PeerSend> sends;       // one per peer != rank, in peer order
  std::vector<PeerCombine> combines; // one per peer != rank, in peer order
};

// counts[s] is source s's validated count vector (E entries; wire.h validates blocks). Fails with
// ResourceExhausted — identically on every rank, since every rank sees the same counts — when
// some rank would receive more overflow rows than C.
Result<StepPlan> plan_step(const Geometry& g, uint64_t step, std::span<const std::span<const uint32_t>> counts);

// Splits `count` rows into `parts` nearly equal runs (the first ones one larger): run i is
// [split_begin(count, parts, i), split_begin(count, parts, i + 1)).
inline uint32_t split_begin(uint32_t count, uint32_t parts, uint32_t i) {
  const uint32_t base = count / parts, extra = count % parts;
  return i * base + (i < extra ? i : extra);
}

}  // namespace fabric_lib::moe

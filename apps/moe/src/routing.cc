// Sender routing (counts, sorted positions) and the proxy's step plan.
#include "fabric_lib/moe/routing.h"

#include <string>

namespace fabric_lib::moe {

Result<LocalRouting> route_tokens(const Geometry& g, const uint32_t* indices, size_t stride, uint32_t tokens) {
  if (tokens > g.max_tokens) {
    return invalid_argument("route_tokens: " + std::to_string(tokens) + " tokens exceed max_num_tokens " +
                            std::to_string(g.max_tokens));
  }
  if (tokens > 0 && (indices == nullptr || stride < g.top_k)) return invalid_argument("route_tokens: bad indices");
  LocalRouting r;
  r.counts.assign(g.experts, 0);
  r.position.resize(size_t{tokens} * g.top_k);
  for (uint32_t t = 0; t < tokens; ++t) {
    for (uint32_t k = 0; k < g.top_k; ++k) {
      const uint32_t e = indices[t * stride + k];
      if (e >= g.experts) {
        return invalid_argument("route_tokens: token " + std::to_string(t) + " names expert " + std::to_string(e) +
                                " of " + std::to_string(g.experts));
      }
      r.position[size_t{t} * g.top_k + k] = r.counts[e]++;  // index among e's pairs, for now
    }
  }
  r.expert_offset.assign(g.experts + 1, 0);
  for (uint32_t e = 0; e < g.experts; ++e) r.expert_offset[e + 1] = r.expert_offset[e] + r.counts[e];
  for (uint32_t t = 0; t < tokens; ++t) {
    for (uint32_t k = 0; k < g.top_k; ++k) {
      r.position[size_t{t} * g.top_k + k] += r.expert_offset[indices[t * stride + k]];
    }
  }
  return r;
}

Result<StepPlan> plan_step(const Geometry& g, uint64_t step, std::span<const std::span<const uint32_t>> counts) {
  const uint32_t W = g.world, L = g.local_experts, P = g.private_tokens;
  if (counts.size() != W) return invalid_argument("plan_step: need one count vector per rank");
  for (const auto& c : counts) {
    if (c.size() != g.experts) return invalid_argument("plan_step: a count vector has the wrong length");
  }
  // sent[s][r]: pairs s sends r; begin[s][r]: where they start in s's sorted order.
  std::vector<uint32_t> sent(size_t{W} * W), begin(size_t{W} * W);
  for (uint32_t s = 0; s < W; ++s) {
    uint32_t off = 0;
    for (uint32_t r = 0; r < W; ++r) {
      uint32_t n = 0;
      for (uint32_t e = r * L; e < (r + 1) * L; ++e) n += counts[s][e];
      begin[s * W + r] = off;
      sent[s * W + r] = n;
      off += n;
    }
  }
  // The capacity check, over every receiver: all ranks compute the same answer.
  for (uint32_t r = 0; r < W; ++r) {
    uint64_t need = 0;
    for (uint32_t s = 0; s < W; ++s) {
      if (s != r && sent[s * W + r] > P) need += sent[s * W + r] - P;
    }
    if (need > g.overflow_tokens) {
      return resource_exhausted("step " + std::to_string(step) + ": rank " + std::to_string(r) + " would receive " +
                                std::to_string(need) + " pairs past its private slots, more than its " +
                                std::to_string(g.overflow_tokens) + " overflow rows (MoeConfig.overflow_tokens)");
    }
  }
  StepPlan plan;
  plan.step = step;
  const RecvPlanLayout lay{W, L};
  plan.recv_plan.assign(lay.words(), 0);
  build_recv_plan(lay, g.rank, P, g.padding, step, [&](uint32_t s, uint32_t e) { return counts[s][e]; },
                  plan.recv_plan.data());
  const uint32_t me = g.rank;
  for (uint32_t r = 0; r < W; ++r) {
    if (r == me) continue;
    PeerSend ps;
    ps.peer = r;
    ps.count = sent[me * W + r];
    ps.src_row = begin[me * W + r];
    ps.private_count = ps.count < P ? ps.count : P;
    ps.overflow_count = ps.count - ps.private_count;
    uint32_t before = 0;  // overflow of the sources before me at r
    for (uint32_t s = 0; s < me; ++s) {
      if (s != r && sent[s * W + r] > P) before += sent[s * W + r] - P;
    }
    ps.overflow_row = W * P + before;
    plan.sends.push_back(ps);

    PeerCombine pc;
    pc.peer = r;
    pc.count = plan.recv_plan[lay.sent(r)];
    pc.stage_row = plan.recv_plan[lay.stage_off(r)];
    pc.dst_row = plan.recv_plan[lay.rank_off(r)];
    plan.combines.push_back(pc);
  }
  return plan;
}

}  // namespace fabric_lib::moe

// libFuzzer target: route blocks from peers, then the plan built from them. The first bytes pick
// a small world (W ranks, E experts, P, C); the rest fill W blocks. Each block must be refused
// (kMalformed) or re-encode to the same bytes; when all decode, plan_step must either refuse the
// step (kResourceExhausted) or give a plan whose every row stays inside this rank's buffers.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "fabric_lib/moe/routing.h"
#include "fabric_lib/moe/wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fabric_lib;
  using namespace fabric_lib::moe;
  if (size < 4) return 0;
  MoeConfig c;
  c.world_size = 1 + data[0] % 4;
  c.rank = data[1] % c.world_size;
  c.num_experts = c.world_size * (1 + data[2] % 3);
  c.experts_per_token = 1 + data[3] % c.num_experts;
  c.max_num_tokens = 8;
  c.hidden_dim = 16;
  c.max_private_tokens = data[2] % 5;
  c.overflow_tokens = data[3] % 2 ? kAuto : data[3] % 17;
  c.expert_padding = 1 + data[1] % 3;
  if (!c.validate().ok()) return 0;
  const Geometry g = Geometry::from(c);
  data += 4;
  size -= 4;
  std::vector<std::vector<uint8_t>> blocks(g.world);
  std::vector<std::span<const uint32_t>> counts(g.world);
  bool all = true;
  for (uint32_t s = 0; s < g.world; ++s) {
    // 64-byte aligned storage, as the route regions are.
    blocks[s].assign(g.route_block + 64, 0);
    uint8_t* b = blocks[s].data() + (64 - reinterpret_cast<uintptr_t>(blocks[s].data()) % 64) % 64;
    const size_t n = std::min(size, g.route_block);
    std::memcpy(b, data, n);
    data += n;
    size -= n;
    Result<std::span<const uint32_t>> r = decode_route_block({b, g.route_block}, s, 3, g.experts, g.max_pairs);
    if (!r.ok()) {
      if (r.status().code() != ErrorCode::kMalformed) std::abort();
      all = false;
      continue;
    }
    std::vector<uint8_t> again(g.route_block, 0);
    encode_route_block(s, 3, *r, again);
    if (std::memcmp(again.data(), b, kRouteHeaderBytes + 4ull * g.experts) != 0) std::abort();
    counts[s] = *r;
  }
  if (!all) return 0;
  Result<StepPlan> plan = plan_step(g, 3, counts);
  if (!plan.ok()) {
    if (plan.status().code() != ErrorCode::kResourceExhausted) std::abort();
    return 0;
  }
  const RecvPlanLayout lay{g.world, g.local_experts};
  const uint32_t* p = plan->recv_plan.data();
  if (p[2] > g.max_recv_tokens) std::abort();
  for (uint32_t e = 0; e < g.local_experts; ++e) {
    for (uint32_t s = 0; s < g.world; ++s) {
      for (uint32_t j = 0; j < p[lay.cnt(s, e)]; ++j) {
        const RecordLocation loc = locate_record(lay, p, g.rank, g.private_tokens, false, s, e, j);
        if (loc.where == RecordSource::kRecvBuffer && loc.row >= g.recv_slots) std::abort();
        if (loc.where == RecordSource::kOwnSendBuffer && loc.row >= g.max_pairs) std::abort();
        if (output_row(lay, p, s, e, j) >= p[2]) std::abort();
      }
    }
  }
  for (const PeerSend& ps : plan->sends) {
    if (ps.overflow_count > 0 && ps.overflow_row + ps.overflow_count > g.recv_slots) std::abort();
    if (ps.src_row + ps.count > g.max_pairs) std::abort();
  }
  for (const PeerCombine& pc : plan->combines) {
    if (pc.stage_row + pc.count > g.combine_stage_rows) std::abort();
  }
  return 0;
}

// One rank's step loop with the reference checks (rank_runner.h).
#include "rank_runner.h"

#include <cstring>
#include <vector>

namespace fabric_lib::moe::testing {
namespace {

constexpr uint8_t kUntouched = 0xCD;

Status mismatch(uint64_t step, const std::string& what) {
  return internal_error("mismatch at step " + std::to_string(step) + " (" +
                        routing_name(routing_of_step(step)) + " routing): " + what);
}

}  // namespace

uint32_t tokens_of(const MoeConfig& c, const RunOptions& o, uint64_t step, uint32_t rank) {
  if (!o.vary_tokens) return c.max_num_tokens;
  switch ((step + rank) % 5) {
    case 3: return c.max_num_tokens / 2;
    case 4: return step % 2 ? 0 : c.max_num_tokens - 1;  // an empty rank now and then
    default: return c.max_num_tokens;
  }
}

Status run_rank(AllToAll& a2a, const RunOptions& o, const std::function<void(const StepReport&)>& report) {
  const MoeConfig& c = a2a.config();
  const Geometry& g = a2a.geometry();
  const uint32_t W = c.world_size, M = c.max_num_tokens, H = c.hidden_dim, S = c.hidden_dim_scale, K = c.experts_per_token;
  const size_t xb = size_t{H} * g.in_size, ob = size_t{H} * g.out_size;
  std::vector<uint8_t> out_x(size_t{g.max_recv_tokens} * xb), expert_y(size_t{g.max_recv_tokens} * ob);
  std::vector<float> out_scale(size_t{g.max_recv_tokens} * S);
  std::vector<int32_t> counts(g.local_experts);
  std::vector<uint8_t> out_tokens(size_t{M} * ob);
  for (uint64_t step = o.first_step; step < o.first_step + o.steps; ++step) {
    std::vector<TokenBatch> all(W);
    for (uint32_t r = 0; r < W; ++r) all[r] = make_tokens(c, o.seed, step, r * M, tokens_of(c, o, step, r));
    const TokenBatch& mine = all[c.rank];
    // Rows past the valid tokens hold garbage the library must ignore.
    TokenBatch given = mine;
    given.x.resize(size_t{M} * xb, 0x7E);
    given.scales.resize(size_t{M} * S, 1e30f);
    given.indices.resize(size_t{M} * K, 0xFFFFFFFFu);
    given.weights.resize(size_t{M} * K, 1e30f);
    const int32_t bound_m = static_cast<int32_t>(mine.tokens);

    DispatchSendArgs ds;
    ds.x = given.x.data();
    ds.x_stride = H;
    ds.x_scale = S ? given.scales.data() : nullptr;
    ds.x_scale_stride_token = S;
    ds.indices = given.indices.data();
    ds.indices_stride = K;
    ds.num_tokens = M;
    ds.bound_m = &bound_m;
    StepReport rep;
    rep.step = step;
    auto fail = [&](Status s) {
      rep.status = s;
      report(rep);
      return s;
    };
    Status s = a2a.dispatch_send(ds);
    if (!s.ok()) return fail(s);
    if (o.after_dispatch_send) o.after_dispatch_send(step);

    std::memset(out_x.data(), kUntouched, out_x.size());
    std::fill(out_scale.begin(), out_scale.end(), -7.0f);
    DispatchRecvArgs dr;
    dr.out_expert_num_tokens = counts.data();
    dr.out_expert_x = out_x.data();
    dr.out_x_stride = H;
    dr.out_rows = g.max_recv_tokens;
    dr.out_expert_x_scale = S ? out_scale.data() : nullptr;
    dr.out_scale_stride_token = S;
    s = a2a.dispatch_recv(dr);
    if (!s.ok()) return fail(s);

    const DispatchExpect want = reference_dispatch(c, c.rank, all);
    rep.recv_rows = want.rows;
    for (uint32_t e = 0; e < g.local_experts; ++e) {
      if (counts[e] != want.counts[e]) {
        return fail(mismatch(step, "local expert " + std::to_string(e) + ": " + std::to_string(counts[e]) +
                                       " tokens, expected " + std::to_string(want.counts[e])));
      }
    }
    std::memset(expert_y.data(), 0xFF, expert_y.size());  // NaN in gaps: must never reach an output
    for (uint32_t row = 0; row < want.rows; ++row) {
      const uint32_t e = want.expert_of[row];
      if (e == UINT32_MAX) continue;
      if (std::memcmp(out_x.data() + row * xb, want.x.data() + row * xb, xb) != 0 ||
          std::memcmp(out_scale.data() + size_t{row} * S, want.scales.data() + size_t{row} * S, size_t{S} * 4) != 0) {
        return fail(mismatch(step, "row " + std::to_string(row) + " (local expert " + std::to_string(e) + ") differs"));
      }
      expert_apply(c, c.rank * g.local_experts + e, out_x.data() + row * xb, out_scale.data() + size_t{row} * S,
                   expert_y.data() + row * ob);
    }
    if (want.rows < g.max_recv_tokens && out_x[size_t{want.rows} * xb] != kUntouched) {
      return fail(mismatch(step, "a row past the layout was written"));
    }

    CombineSendArgs cs;
    cs.expert_y = expert_y.data();
    cs.expert_y_stride = H;
    cs.rows = g.max_recv_tokens;
    s = a2a.combine_send(cs);
    if (!s.ok()) return fail(s);
    std::memset(out_tokens.data(), kUntouched, out_tokens.size());
    CombineRecvArgs cr;
    cr.out_tokens = out_tokens.data();
    cr.out_stride = H;
    cr.weights = given.weights.data();
    cr.weights_stride = K;
    cr.num_tokens = M;
    cr.bound_m = &bound_m;
    s = a2a.combine_recv(cr);
    if (!s.ok()) return fail(s);
    const std::vector<uint8_t> ref = reference_combine(c, mine);
    for (uint32_t t = 0; t < mine.tokens; ++t) {
      if (std::memcmp(out_tokens.data() + t * ob, ref.data() + t * ob, ob) != 0) {
        return fail(mismatch(step, "combined token " + std::to_string(t) + " differs from the closed form"));
      }
    }
    for (size_t i = size_t{mine.tokens} * ob; i < out_tokens.size(); ++i) {
      if (out_tokens[i] != kUntouched) return fail(mismatch(step, "combine wrote past the valid tokens"));
    }
    rep.combine_digest = rows_digest(out_tokens, ob, c.rank * M, mine.tokens);
    report(rep);
  }
  return ok_status();
}

}  // namespace fabric_lib::moe::testing

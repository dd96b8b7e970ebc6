// CPU halves of dispatch and combine (cpu_halves.h). Compiled with -ffp-contract=off: the
// combine's fp32 sum must round every product and sum, like the CUDA kernel's __fmul_rn /
// __fadd_rn, so results are bit-identical across runs, EP sizes and the two implementations.
#include "cpu_halves.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "fabric_lib/moe/routing.h"
#include "fabric_lib/moe/wire.h"

namespace fabric_lib::moe::detail {

uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN, sign kept
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float bf16_to_float(uint16_t b) {
  const uint32_t u = uint32_t{b} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

namespace {

std::chrono::nanoseconds half_timeout(const RankState& st) { return st.config.step_timeout * 2 + std::chrono::seconds(1); }

uint32_t valid_tokens(uint32_t given, const int32_t* bound_m) {
  if (bound_m == nullptr) return given;
  const int32_t m = *bound_m;
  return m < 0 ? 0 : (static_cast<uint32_t>(m) < given ? static_cast<uint32_t>(m) : given);
}

}  // namespace

Status wait_word(RankState& st, uint32_t w, uint64_t target, std::chrono::nanoseconds timeout, const char* what) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    const uint32_t seen = st.bell.seq();
    const uint64_t v = st.control.load(w);
    if (v == kWordFailed) {
      Status f = st.failure_status();
      return f.ok() ? Status(ErrorCode::kCancelled, std::string(what) + ": the engine ended the expectation") : f;
    }
    if (st.control.load(kAbort) != 0) return st.failure_status();
    if (v >= target) return ok_status();
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      Status s(ErrorCode::kDeadlineExceeded, std::string(what) + " of step " + std::to_string(target) + " did not come");
      st.fail(s, target);
      return s;
    }
    st.bell.wait(seen, std::min<std::chrono::nanoseconds>(deadline - now, std::chrono::milliseconds(50)));
  }
}

Status cpu_dispatch_send(RankState& st, CpuStep& cs, const DispatchSendArgs& a) {
  const Geometry& g = st.g;
  const uint64_t t = cs.step + 1;
  FABRIC_LIB_RETURN_IF_ERROR(wait_word(st, kSendFree, t - 1, half_timeout(st), "send buffers free"));
  const uint32_t m = valid_tokens(a.num_tokens, a.bound_m);
  if (m > 0 && (a.x == nullptr || a.x_stride < g.hidden || (g.hidden_scale > 0 && a.x_scale == nullptr))) {
    return invalid_argument("dispatch: bad token or scale arguments");
  }
  Result<LocalRouting> r = route_tokens(g, a.indices, a.indices_stride, m);
  if (!r.ok()) return r.status();  // nothing was published: the step has not started
  // A rank with no tokens this step has no positions (and memcpy must not see a null source).
  if (!r->position.empty()) std::memcpy(st.regions.positions, r->position.data(), r->position.size() * 4);
  std::span<uint8_t> block(st.regions.route_send + route_parity(t) * g.route_block, g.route_block);
  encode_route_block(g.rank, t, r->counts, block);
  cs.step = t;
  cs.tokens = m;
  st.control.store(kRoutesReady, t);
  st.bell.ring();

  const auto* x = static_cast<const uint8_t*>(a.x);
  for (uint32_t tok = 0; tok < m; ++tok) {
    const uint8_t* src = x + size_t{tok} * a.x_stride * g.in_size;
    for (uint32_t k = 0; k < g.top_k; ++k) {
      uint8_t* rec = st.regions.dispatch_send + size_t{r->position[size_t{tok} * g.top_k + k]} * g.dispatch_record;
      std::memcpy(rec, src, g.x_bytes);
      auto* scales = reinterpret_cast<float*>(rec + g.x_stride);
      for (uint32_t i = 0; i < g.hidden_scale; ++i) {
        scales[i] = a.x_scale[size_t{tok} * a.x_scale_stride_token + i * a.x_scale_stride_elem];
      }
    }
  }
  st.control.store(kSendReady, t);
  st.bell.ring();
  return ok_status();
}

Status cpu_dispatch_recv(RankState& st, const CpuStep& cs, const DispatchRecvArgs& a) {
  const Geometry& g = st.g;
  const uint64_t t = cs.step;
  FABRIC_LIB_RETURN_IF_ERROR(wait_word(st, kPlanReady, t, half_timeout(st), "routes"));
  if (g.world > 1) FABRIC_LIB_RETURN_IF_ERROR(wait_word(st, kDispatchRound, t, half_timeout(st), "tokens"));
  const RecvPlanLayout& lay = st.control.layout();
  const uint32_t* plan = st.control.plan(t);
  const uint32_t rows = plan[2];
  if (rows > a.out_rows || (rows > 0 && a.out_expert_x == nullptr) || a.out_expert_num_tokens == nullptr ||
      (g.hidden_scale > 0 && rows > 0 && a.out_expert_x_scale == nullptr) || a.out_x_stride < g.hidden) {
    Status s = resource_exhausted("dispatch: step " + std::to_string(t) + " needs " + std::to_string(rows) +
                                  " output rows (and the count, token and scale outputs); got " +
                                  std::to_string(a.out_rows));
    st.fail(s, t);
    return s;
  }
  const bool direct = st.config.path == Path::kDirect;
  auto* out = static_cast<uint8_t*>(a.out_expert_x);
  for (uint32_t e = 0; e < g.local_experts; ++e) {
    for (uint32_t s = 0; s < g.world; ++s) {
      const uint32_t n = plan[lay.cnt(s, e)];
      for (uint32_t j = 0; j < n; ++j) {
        const RecordLocation loc = locate_record(lay, plan, g.rank, g.private_tokens, direct, s, e, j);
        const uint8_t* rec = (loc.where == RecordSource::kOwnSendBuffer ? st.regions.dispatch_send : st.regions.dispatch_recv) +
                             size_t{loc.row} * g.dispatch_record;
        const uint32_t row = output_row(lay, plan, s, e, j);
        std::memcpy(out + size_t{row} * a.out_x_stride * g.in_size, rec, g.x_bytes);
        const auto* scales = reinterpret_cast<const float*>(rec + g.x_stride);
        for (uint32_t i = 0; i < g.hidden_scale; ++i) {
          a.out_expert_x_scale[size_t{row} * a.out_scale_stride_token + i * a.out_scale_stride_elem] = scales[i];
        }
      }
    }
    a.out_expert_num_tokens[e] = static_cast<int32_t>(plan[lay.total(e)]);
  }
  return ok_status();
}

Status cpu_combine_send(RankState& st, const CpuStep& cs, const CombineSendArgs& a) {
  const Geometry& g = st.g;
  const uint64_t t = cs.step;
  FABRIC_LIB_RETURN_IF_ERROR(wait_word(st, kCombineFree, t - 1, half_timeout(st), "combine buffers free"));
  const RecvPlanLayout& lay = st.control.layout();
  const uint32_t* plan = st.control.plan(t);
  if (plan[2] > a.rows || (plan[2] > 0 && a.expert_y == nullptr) || a.expert_y_stride < g.hidden) {
    Status s = invalid_argument("combine: expert_y has " + std::to_string(a.rows) + " rows; the layout has " +
                                std::to_string(plan[2]));
    st.fail(s, t);
    return s;
  }
  const size_t row_bytes = size_t{g.hidden} * g.out_size;
  const auto* y = static_cast<const uint8_t*>(a.expert_y);
  for (uint32_t e = 0; e < g.local_experts; ++e) {
    for (uint32_t s = 0; s < g.world; ++s) {
      const uint32_t n = plan[lay.cnt(s, e)];
      for (uint32_t j = 0; j < n; ++j) {
        const uint32_t q = plan[lay.blk(s, e)] + j;
        uint8_t* dst = s == g.rank ? st.regions.combine_recv + size_t{plan[lay.rank_off(s)] + q} * g.combine_record
                                   : st.regions.combine_send + size_t{plan[lay.stage_off(s)] + q} * g.combine_record;
        std::memcpy(dst, y + size_t{output_row(lay, plan, s, e, j)} * a.expert_y_stride * g.out_size, row_bytes);
      }
    }
  }
  st.control.store(kCombineReady, t);
  st.bell.ring();
  return ok_status();
}

Status cpu_combine_recv(RankState& st, const CpuStep& cs, const CombineRecvArgs& a) {
  const Geometry& g = st.g;
  const uint64_t t = cs.step;
  if (g.world > 1) FABRIC_LIB_RETURN_IF_ERROR(wait_word(st, kCombineRound, t, half_timeout(st), "combine results"));
  // The own results are stored by combine_send; with W == 1 nothing else comes.
  FABRIC_LIB_RETURN_IF_ERROR(wait_word(st, kCombineReady, t, half_timeout(st), "combine_send"));
  const uint32_t m = valid_tokens(a.num_tokens, a.bound_m) < cs.tokens ? valid_tokens(a.num_tokens, a.bound_m) : cs.tokens;
  if (m > 0 && (a.out_tokens == nullptr || a.weights == nullptr || a.weights_stride < g.top_k || a.out_stride < g.hidden)) {
    return invalid_argument("combine: bad output or weight arguments");
  }
  std::vector<float> acc(g.hidden);
  for (uint32_t tok = 0; tok < m; ++tok) {
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (uint32_t k = 0; k < g.top_k; ++k) {
      const float w = a.weights[size_t{tok} * a.weights_stride + k];
      const uint8_t* rec = st.regions.combine_recv + size_t{st.regions.positions[size_t{tok} * g.top_k + k]} * g.combine_record;
      if (g.out_size == 2) {
        const auto* y = reinterpret_cast<const uint16_t*>(rec);
        for (uint32_t h = 0; h < g.hidden; ++h) acc[h] = acc[h] + w * bf16_to_float(y[h]);
      } else {
        const auto* y = reinterpret_cast<const float*>(rec);
        for (uint32_t h = 0; h < g.hidden; ++h) acc[h] = acc[h] + w * y[h];
      }
    }
    uint8_t* out = static_cast<uint8_t*>(a.out_tokens) + size_t{tok} * a.out_stride * g.out_size;
    if (g.out_size == 2) {
      auto* o = reinterpret_cast<uint16_t*>(out);
      for (uint32_t h = 0; h < g.hidden; ++h) o[h] = float_to_bf16(acc[h]);
    } else {
      std::memcpy(out, acc.data(), size_t{g.hidden} * 4);
    }
  }
  return ok_status();
}

}  // namespace fabric_lib::moe::detail

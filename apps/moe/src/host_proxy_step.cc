// HostProxy: the actions of one step (host_proxy.h lists them) and its deadlines.
#include <cstring>
#include <string>

#include "host_proxy.h"

namespace fabric_lib::moe::detail {

namespace {

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count());
}

bool reached(const Control& c, uint32_t word, uint64_t t) {
  const uint64_t v = c.load(word);
  return v != kWordFailed && v >= t;
}

}  // namespace

bool HostProxy::advance() {
  Step& p = step_;
  const uint64_t t = p.t;
  const Control& c = st_.control;
  auto failed = [&](const Status& s) {
    st_.fail(s, t);
    return false;
  };
  if (!p.routes_posted) {
    if (c.load(kRoutesReady) < t) return false;  // nothing of step t can happen before
    p.times.step = t;
    p.times.routes_seen_ns = now_ns();
    if (st_.on_gpu) p.times.routes_gpu_ns = c.load(kRoutesReadyGpuNs);
    c.store(kProxySeenRoutes, t);
    Status s = post_routes();
    return s.ok() ? true : failed(s);
  }
  if (!p.private_posted && c.load(kSendReady) >= t) {
    Status s = post_private();
    return s.ok() ? true : failed(s);
  }
  if (!p.planned && (g_.world == 1 || reached(c, kRouteRound, t))) {
    Status s = plan_routes();
    return s.ok() ? true : failed(s);
  }
  if (p.planned && p.private_posted && !p.overflow_posted) {
    Status s = post_overflow();
    return s.ok() ? true : failed(s);
  }
  if (p.planned && !p.combine_posted && c.load(kCombineReady) >= t) {
    Status s = post_combine();
    return s.ok() ? true : failed(s);
  }
  if (!p.dispatch_freed && p.overflow_posted &&
      sinks_->dispatch_done.load(std::memory_order_acquire) >= dispatch_submitted_) {
    c.store(kSendFree, t);
    p.dispatch_freed = true;
    st_.bell.ring();
    return true;
  }
  if (!p.combine_freed && p.combine_posted && sinks_->combine_done.load(std::memory_order_acquire) >= combine_submitted_) {
    c.store(kCombineFree, t);
    p.combine_freed = true;
    st_.bell.ring();
    return true;
  }
  if (p.dispatch_freed && p.combine_freed &&
      (g_.world == 1 || (reached(c, kDispatchRound, t) && reached(c, kCombineRound, t)))) {
    finish_step();
    return true;
  }
  return false;
}

Status HostProxy::post_routes() {
  Step& p = step_;
  const uint32_t parity = route_parity(p.t);
  const uint8_t* own = st_.regions.route_send + size_t{parity} * g_.route_block;
  Result<std::span<const uint32_t>> counts =
      decode_route_block({own, g_.route_block}, g_.rank, p.t, g_.experts, g_.max_pairs);
  if (!counts.ok()) return internal_error("own " + counts.status().message());
  p.own_counts.assign(counts->begin(), counts->end());
  std::memcpy(st_.regions.route_recv + route_recv_offset(parity, g_.rank, g_.world, g_.route_block), own, g_.route_block);
  if (!peers_.empty()) {
    std::vector<ScatterSlice> slices(peers_.size(), ScatterSlice{g_.route_block, parity * g_.route_block,
                                                                 route_recv_offset(parity, g_.rank, g_.world, g_.route_block)});
    const uint64_t t0 = now_ns();
    p.times.routes_submit_ns = t0;
    Result<TransferId> id = s_.engine->submit_prepared(route_scatter_, slices, imm_route_, write_completion(true, "the route scatter"));
    p.times.posting_ns += now_ns() - t0;
    if (!id.ok()) return Status(id.status().code(), "route scatter: " + id.status().message());
    ++dispatch_submitted_;
  }
  p.routes_posted = true;
  p.routes_at = Clock::now();
  p.times.routes_posted_ns = now_ns();
  return ok_status();
}

Status HostProxy::post_private() {
  Step& p = step_;
  const uint64_t Td = g_.dispatch_record;
  if (!peers_.empty()) {
    std::vector<ScatterSlice> slices;
    slices.reserve(peers_.size());
    uint32_t begin = 0;
    for (uint32_t r = 0, i = 0; r < g_.world; ++r) {
      uint32_t n = 0;
      for (uint32_t e = r * g_.local_experts; e < (r + 1) * g_.local_experts; ++e) n += p.own_counts[e];
      if (r != g_.rank) {
        const uint32_t priv = n < g_.private_tokens ? n : g_.private_tokens;
        slices.push_back({priv * Td, priv ? begin * Td : 0, 0});
        ++i;
      }
      begin += n;
    }
    const uint64_t t0 = now_ns();
    Result<TransferId> id = s_.engine->submit_prepared(private_scatter_, slices, imm_dispatch_, write_completion(true, "a private token write"));
    p.times.posting_ns += now_ns() - t0;
    if (!id.ok()) return Status(id.status().code(), "private token writes: " + id.status().message());
    ++dispatch_submitted_;
  }
  p.private_posted = true;
  p.times.private_posted_ns = now_ns();
  return ok_status();
}

Status HostProxy::plan_routes() {
  Step& p = step_;
  const uint32_t parity = route_parity(p.t);
  // Copy first, validate the copy: a peer cannot change the counts after they were checked.
  std::memcpy(blocks_.data(), st_.regions.route_recv + route_recv_offset(parity, 0, g_.world, g_.route_block),
              blocks_.size());
  std::vector<std::span<const uint32_t>> counts(g_.world);
  for (uint32_t s = 0; s < g_.world; ++s) {
    Result<std::span<const uint32_t>> c = decode_route_block(
        {blocks_.data() + size_t{s} * g_.route_block, g_.route_block}, s, p.t, g_.experts, g_.max_pairs);
    if (!c.ok()) return c.status();
    counts[s] = *c;
  }
  Result<StepPlan> plan = plan_step(g_, p.t, counts);
  if (!plan.ok()) return plan.status();
  p.plan = std::move(plan).value();
  std::memcpy(st_.control.plan(p.t), p.plan.recv_plan.data(), p.plan.recv_plan.size() * 4);
  st_.control.store(kPlanReady, p.t);
  st_.bell.ring();
  p.planned = true;
  p.times.routes_arrived_ns = now_ns();
  return ok_status();
}

Status HostProxy::post_overflow() {
  Step& p = step_;
  const uint64_t Td = g_.dispatch_record;
  const uint32_t base = g_.world * g_.private_tokens;
  if (!peers_.empty()) {
    std::vector<ScatterSlice> slices;
    slices.reserve(peers_.size() * domains_);
    for (const PeerSend& ps : p.plan.sends) {
      for (uint32_t d = 0; d < domains_; ++d) {
        const uint32_t b = split_begin(ps.overflow_count, domains_, d), e = split_begin(ps.overflow_count, domains_, d + 1);
        if (e == b) {
          slices.push_back({0, 0, 0});
        } else {
          slices.push_back({(e - b) * Td, (ps.src_row + ps.private_count + b) * Td, (ps.overflow_row - base + b) * Td});
        }
      }
    }
    const uint64_t t0 = now_ns();
    Result<TransferId> id = s_.engine->submit_prepared(overflow_scatter_, slices, imm_dispatch_, write_completion(true, "an overflow token write"));
    p.times.posting_ns += now_ns() - t0;
    if (!id.ok()) return Status(id.status().code(), "overflow token writes: " + id.status().message());
    ++dispatch_submitted_;
  }
  p.overflow_posted = true;
  p.overflow_at = Clock::now();
  p.times.overflow_posted_ns = now_ns();
  return ok_status();
}

Status HostProxy::post_combine() {
  Step& p = step_;
  p.times.combine_seen_ns = now_ns();
  const uint64_t Tc = g_.combine_record;
  if (!peers_.empty()) {
    std::vector<ScatterSlice> slices;
    slices.reserve(peers_.size() * domains_);
    for (const PeerCombine& pc : p.plan.combines) {
      for (uint32_t d = 0; d < domains_; ++d) {
        const uint32_t b = split_begin(pc.count, domains_, d), e = split_begin(pc.count, domains_, d + 1);
        if (e == b) {
          slices.push_back({0, 0, 0});
        } else {
          slices.push_back({(e - b) * Tc, (pc.stage_row + b) * Tc, (pc.dst_row + b) * Tc});
        }
      }
    }
    const uint64_t t0 = now_ns();
    Result<TransferId> id = s_.engine->submit_prepared(combine_scatter_, slices, imm_combine_, write_completion(false, "a combine write"));
    p.times.posting_ns += now_ns() - t0;
    if (!id.ok()) return Status(id.status().code(), "combine writes: " + id.status().message());
    ++combine_submitted_;
  }
  p.combine_posted = true;
  p.combine_at = Clock::now();
  p.times.combine_posted_ns = now_ns();
  return ok_status();
}

void HostProxy::finish_step() {
  step_.times.done_ns = now_ns();
  {
    std::lock_guard<std::mutex> lock(times_mu_);
    if (times_.size() < 100000) times_.push_back(step_.times);
  }
  const uint64_t next = step_.t + 1;
  step_ = Step{};
  step_.t = next;
}

std::string HostProxy::describe() const {
  const Control& c = st_.control;
  std::string s;
  const char* names[] = {"routes_ready", "send_ready", "send_free", "plan_ready", "route_round",
                         "dispatch_round", "combine_ready", "combine_free", "combine_round"};
  for (uint32_t w = kRoutesReady; w <= kCombineRound; ++w) {
    const uint64_t v = c.load(w);
    s += std::string(names[w]) + "=" + (v == kWordFailed ? "failed" : std::to_string(v)) + " ";
  }
  s += "writes dispatch " + std::to_string(sinks_->dispatch_done.load()) + "/" + std::to_string(dispatch_submitted_) +
       " combine " + std::to_string(sinks_->combine_done.load()) + "/" + std::to_string(combine_submitted_);
  for (uint32_t imm : {imm_route_, imm_dispatch_, imm_combine_}) {
    s += " imm+" + std::to_string(imm - imm_route_) + " count " + std::to_string(s_.engine->imms().count(imm)) +
         " rounds " + std::to_string(s_.engine->imms().rounds(imm));
  }
  return s;
}

bool HostProxy::check_deadlines() {
  if (g_.world == 1) return false;
  const Control& c = st_.control;
  const Step& p = step_;
  for (uint32_t w : {kRouteRound, kDispatchRound, kCombineRound}) {
    if (c.load(w) == kWordFailed) {
      st_.fail(cancelled("step " + std::to_string(p.t) + ": the engine ended an imm expectation (stopped?)"), p.t);
      return true;
    }
  }
  const auto now = Clock::now();
  const auto timeout = st_.config.step_timeout;
  auto late = [&](bool waiting, Clock::time_point since, const std::string& what) {
    if (!waiting || now - since <= timeout) return false;
    st_.fail(Status(ErrorCode::kDeadlineExceeded, "step " + std::to_string(p.t) + ": " + what + " within " +
                                                      std::to_string(timeout.count()) + " ms (" + describe() + ")"),
             p.t);
    return true;
  };
  if (p.routes_posted && !p.planned) {
    // Name the ranks whose blocks for this step have not come.
    std::string missing;
    const uint32_t parity = route_parity(p.t);
    for (uint32_t s = 0; s < g_.world; ++s) {
      RouteHeader h;
      std::memcpy(&h, st_.regions.route_recv + route_recv_offset(parity, s, g_.world, g_.route_block), sizeof h);
      if (h.step != p.t) missing += (missing.empty() ? "" : ",") + std::to_string(s);
    }
    if (late(true, p.routes_at, "the routing counts of rank(s) " + missing + " did not arrive")) return true;
  }
  if (late(p.overflow_posted && !reached(c, kDispatchRound, p.t), p.overflow_at, "not every peer's tokens arrived")) {
    return true;
  }
  return late(p.combine_posted && !reached(c, kCombineRound, p.t), p.combine_at, "not every peer's combine results arrived");
}

}  // namespace fabric_lib::moe::detail

// HostProxy: set-up (peer groups, prepared scatters, repeating expectations) and the thread.
// The per-step actions are in host_proxy_step.cc.
#include "host_proxy.h"

#include <pthread.h>
#include <sched.h>

#include <string>

namespace fabric_lib::moe::detail {

namespace {
// Target counts per peer of the prepared scatters.
constexpr uint32_t kPrivateTargetsPerPeer = 1;
}  // namespace

HostProxy::HostProxy(ProxySetup setup)
    : s_(std::move(setup)), st_(*s_.state), g_(s_.state->g), sinks_(std::make_shared<SinkGuard>()) {
  sinks_->state = s_.state;
}

HostProxy::~HostProxy() { stop(); }

Result<std::unique_ptr<HostProxy>> HostProxy::start(ProxySetup setup) {
  std::unique_ptr<HostProxy> p(new HostProxy(std::move(setup)));
  FABRIC_LIB_RETURN_IF_ERROR(p->prepare());
  p->thread_ = std::thread([raw = p.get(), exit = p->exit_] {
    raw->run();
    std::lock_guard<std::mutex> lock(exit->mu);
    exit->done = true;
    exit->cv.notify_all();
  });
  return p;
}

// Joins the thread, except when the engine gave up on a group and the thread still has not left
// within a second: it may then be parked for good inside a provider call it made itself (a submit
// posted on the caller's thread, TransferEngineBuilder::post_on_caller_thread's caveat), and a
// join would never return. Such a thread never runs our code again, so it is left behind.
void HostProxy::join_thread() {
  std::unique_lock<std::mutex> lock(exit_->mu);
  auto abandoned_since = Clock::time_point::max();
  while (!exit_->cv.wait_for(lock, std::chrono::milliseconds(50), [&] { return exit_->done; })) {
    if (abandoned_since == Clock::time_point::max()) {
      if (s_.engine->stats().groups_abandoned > 0) abandoned_since = Clock::now();
    } else if (Clock::now() - abandoned_since > std::chrono::seconds(1)) {
      thread_.detach();
      return;
    }
  }
  lock.unlock();
  thread_.join();
}

void HostProxy::stop() {
  bool was = running_.exchange(false);
  st_.bell.ring();
  if (thread_.joinable()) join_thread();
  if (!was) return;
  if (g_.world > 1) {
    // Sinks must not touch the rank's memory once this returns.
    {
      std::lock_guard<std::mutex> lock(sinks_->mu);
      sinks_->state = nullptr;
    }
    for (uint32_t imm : {imm_route_, imm_dispatch_, imm_combine_}) s_.engine->imms().release(imm);
  }
}

std::vector<ProxyStepTimes> HostProxy::take_step_times() {
  std::lock_guard<std::mutex> lock(times_mu_);
  return std::exchange(times_, {});
}

RepeatingSink HostProxy::round_sink(uint32_t word) {
  if (st_.on_gpu) return RepeatingSink::flag(st_.control.word(word), kWordFailed);
  // CPU ranks: store and ring, so sleeping halves and the proxy wake at once.
  return RepeatingSink::callback([guard = sinks_, word](uint64_t round, const Status& status) {
    std::lock_guard<std::mutex> lock(guard->mu);
    if (guard->state == nullptr) return;
    guard->state->control.store(word, status.ok() ? round : kWordFailed);
    guard->state->bell.ring();
  });
}

Completion HostProxy::write_completion(bool dispatch, const char* what) {
  const uint64_t step = step_.t;
  Completion c = Completion::callback([guard = sinks_, dispatch, what, step](const Status& status) {
    (dispatch ? guard->dispatch_done : guard->combine_done).fetch_add(1, std::memory_order_acq_rel);
    std::lock_guard<std::mutex> lock(guard->mu);
    if (guard->state == nullptr) return;
    if (!status.ok()) {
      guard->state->fail(Status(status.code(), "step " + std::to_string(step) + ": " + what + " failed: " + status.message()),
                         step);
    }
    guard->state->bell.ring();
  });
  return std::move(c).with_timeout(st_.config.step_timeout);
}

Status HostProxy::prepare() {
  TransferEngine& eng = *s_.engine;
  domains_ = static_cast<uint32_t>(eng.num_domains());
  imm_route_ = st_.config.imm_base;
  imm_dispatch_ = imm_route_ + 1;
  imm_combine_ = imm_route_ + 2;
  for (uint32_t r = 0; r < g_.world; ++r) {
    if (r != g_.rank) peers_.push_back(r);
  }
  blocks_.assign(size_t{g_.world} * g_.route_block, 0);
  if (peers_.empty()) return ok_status();

  std::vector<MrDesc> route_descs, dispatch_descs, combine_descs;
  for (uint32_t r : peers_) {
    route_descs.push_back(s_.infos[r].route_recv);
    dispatch_descs.push_back(s_.infos[r].dispatch_recv);
    combine_descs.push_back(s_.infos[r].combine_recv);
  }
  auto group = [&](std::vector<MrDesc>& d, PeerGroup& out, const char* what) -> Status {
    Result<PeerGroup> pg = eng.add_peer_group(d);
    if (!pg.ok()) return Status(pg.status().code(), std::string("peer group for ") + what + ": " + pg.status().message());
    out = *pg;
    return ok_status();
  };
  FABRIC_LIB_RETURN_IF_ERROR(group(route_descs, route_group_, "routes"));
  FABRIC_LIB_RETURN_IF_ERROR(group(dispatch_descs, dispatch_group_, "tokens"));
  FABRIC_LIB_RETURN_IF_ERROR(group(combine_descs, combine_group_, "combine"));

  const uint64_t W = g_.world, P = g_.private_tokens, C = g_.overflow_tokens;
  const uint64_t Td = g_.dispatch_record, Tc = g_.combine_record;
  const uint64_t send_bytes = uint64_t{g_.max_pairs} * Td;
  ScatterTemplate route_t{s_.route_send_mr, &route_group_, {}, ScatterSharding::kByPeer, RoundRobin{}};
  ScatterTemplate private_t{s_.dispatch_send_mr, &dispatch_group_, {}, ScatterSharding::kByPeer, RoundRobin{}};
  ScatterTemplate overflow_t{s_.dispatch_send_mr, &dispatch_group_, {}, ScatterSharding::kByPeer, RoundRobin{}};
  ScatterTemplate combine_t{s_.combine_send_mr, &combine_group_, {}, ScatterSharding::kByPeer, RoundRobin{}};
  for (uint32_t i = 0; i < peers_.size(); ++i) {
    route_t.targets.push_back({i, 0, 2 * g_.route_block, 0, 2 * W * g_.route_block});
    private_t.targets.push_back({i, 0, send_bytes, g_.rank * P * Td, P * Td});
    for (uint32_t d = 0; d < domains_; ++d) {
      overflow_t.targets.push_back({i, 0, send_bytes, W * P * Td, C * Td});
      combine_t.targets.push_back({i, 0, uint64_t{g_.combine_stage_rows} * Tc, 0, uint64_t{g_.max_pairs} * Tc});
    }
  }
  auto prep = [&](const ScatterTemplate& t, PreparedScatter& out, const char* what) -> Status {
    Result<PreparedScatter> p = eng.prepare_scatter(t);
    if (!p.ok()) return Status(p.status().code(), std::string("prepare ") + what + " scatter: " + p.status().message());
    out = *p;
    return ok_status();
  };
  FABRIC_LIB_RETURN_IF_ERROR(prep(route_t, route_scatter_, "route"));
  FABRIC_LIB_RETURN_IF_ERROR(prep(private_t, private_scatter_, "private"));
  FABRIC_LIB_RETURN_IF_ERROR(prep(overflow_t, overflow_scatter_, "overflow"));
  FABRIC_LIB_RETURN_IF_ERROR(prep(combine_t, combine_scatter_, "combine"));

  // Imms per target are the same for an empty and for the largest slice: the per-step totals are
  // constants, which is what lets one repeating expectation serve every step.
  auto per_target = [&](uint64_t max_len) -> Result<uint64_t> {
    const uint64_t lo = imm_count_of_scatter_target(0, ScatterSharding::kByPeer, RoundRobin{}, domains_);
    const uint64_t hi = imm_count_of_scatter_target(max_len, ScatterSharding::kByPeer, RoundRobin{}, domains_);
    if (lo != hi) return internal_error("a slice of " + std::to_string(max_len) + " bytes would change the imm count");
    return lo;
  };
  Result<uint64_t> r_route = per_target(g_.route_block);
  Result<uint64_t> r_tok = per_target(uint64_t{g_.max_pairs_per_rank} * Td);
  Result<uint64_t> r_comb = per_target(uint64_t{g_.max_pairs_per_rank} * Tc);
  if (!r_route.ok()) return r_route.status();
  if (!r_tok.ok()) return r_tok.status();
  if (!r_comb.ok()) return r_comb.status();
  const uint64_t peers = peers_.size();
  const uint64_t n_route = peers * *r_route;
  const uint64_t n_dispatch = peers * (kPrivateTargetsPerPeer + domains_) * *r_tok;
  const uint64_t n_combine = peers * domains_ * *r_comb;
  ImmCounter& imms = eng.imms();
  FABRIC_LIB_RETURN_IF_ERROR(imms.expect_every(imm_route_, n_route, round_sink(kRouteRound)));
  Status s = imms.expect_every(imm_dispatch_, n_dispatch, round_sink(kDispatchRound));
  if (s.ok()) s = imms.expect_every(imm_combine_, n_combine, round_sink(kCombineRound));
  if (!s.ok()) {
    for (uint32_t imm : {imm_route_, imm_dispatch_, imm_combine_}) imms.release(imm);
    return s;
  }
  return ok_status();
}

void HostProxy::run() {
  if (st_.config.proxy_cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(st_.config.proxy_cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
  }
  pthread_setname_np(pthread_self(), "moe-proxy");
  // GPU ranks: the kernels cannot ring the doorbell, so poll — spin right after progress, then
  // sleep in short steps. CPU ranks: everything that changes a word rings.
  constexpr auto kSpin = std::chrono::microseconds(200);
  Clock::time_point last_progress = Clock::now();
  while (running_.load(std::memory_order_acquire)) {
    const uint32_t seen = st_.bell.seq();
    if (st_.control.load(kAbort) != 0) {
      st_.bell.wait(seen, std::chrono::milliseconds(20));  // failed: idle until stopped
      continue;
    }
    bool progressed = false;
    while (advance()) progressed = true;
    if (!progressed) progressed = check_deadlines();
    const Clock::time_point now = Clock::now();
    if (progressed) {
      last_progress = now;
      continue;
    }
    if (st_.on_gpu) {
      if (st_.config.proxy_idle == IdlePolicy::kSpin || now - last_progress < kSpin) continue;
      st_.bell.wait(seen, std::chrono::microseconds(20));
    } else {
      st_.bell.wait(seen, std::chrono::milliseconds(5));  // the period of the deadline checks
    }
  }
}

}  // namespace fabric_lib::moe::detail

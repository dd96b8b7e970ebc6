#include "core/group_worker.h"

#include <pthread.h>
#include <sched.h>

#include <cstring>
#include <thread>

#include "core/idle_waiter.h"
#include "base/log.h"
#include "core/peer_group_data.h"
#include "transport/guard/guarded_domain.h"

namespace fabric_lib::detail {
namespace {

constexpr size_t kRequestsPerAccept = 64;
constexpr size_t kMaxLatencySamples = 1 << 22;
constexpr int64_t kShutdownDrainNs = 500'000'000;
constexpr int64_t kShutdownQuietNs = 10'000'000;  // drain_before_close() says why

Status pin_to_cpu(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  int ret = pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
  if (ret != 0) return invalid_argument("cannot pin worker to CPU " + std::to_string(cpu) + ": " + std::strerror(ret));
  return ok_status();
}

}  // namespace

GroupWorker::GroupWorker(GroupWorkerConfig config, ImmCountTable& imms, CompletionDispatcher& dispatcher)
    : config_(std::move(config)),
      imms_(imms),
      dispatcher_(dispatcher),
      inbox_(std::make_shared<WorkerInbox>()),
      metrics_(config_.group, config_.domains.size(), config_.detailed_metrics),
      peers_(config_.domains.size(), &metrics_) {
  std::vector<std::string> names;
  for (const transport::DomainSpec& spec : config_.domains) names.push_back(spec.interface_name);
  metrics_.set_domain_names(std::move(names));
}

void GroupWorker::add_stats(EngineStats& s) const {
  Metrics m;
  m.ops.resize(kNumOpTypes);
  metrics_.read_into(m);
  for (const OpMetrics& op : m.ops) {
    s.requests_completed += op.requests_completed;
    s.requests_failed += op.requests_failed_total();
  }
  if (s.wrs_posted_by_domain.size() < m.domains.size()) s.wrs_posted_by_domain.resize(m.domains.size());
  for (const DomainMetrics& d : m.domains) {
    s.wrs_posted += d.wrs_posted;
    s.wrs_posted_by_domain[d.domain] += d.wrs_posted;
    s.imms_received += d.imms_received;
  }
  s.messages_received += m.messages_received;
  s.deadlines_exceeded += m.deadlines_exceeded;
  s.paths_failed += m.path_failures;
  s.peers_unreachable += m.peers_unreachable;
  for (const auto& c : domain_counters_) {
    if (!c) continue;
    s.unordered_windows_shuffled += c->unordered_windows_shuffled.load(std::memory_order_relaxed);
    s.unordered_events_held += c->unordered_events_held.load(std::memory_order_relaxed);
  }
}

GroupWorker::~GroupWorker() { stop(); }

Status GroupWorker::start() {
  if (inbox_->event_fd() < 0) return resource_exhausted("eventfd() failed");
  std::promise<Status> opened;
  std::future<Status> result = opened.get_future();
  thread_ = std::thread([this, &opened] {
    thread_main(&opened);
    exited_.set_value();
  });
  Status status = result.get();
  if (!status.ok()) thread_.join();
  return status;
}

void GroupWorker::stop() {
  if (!thread_.joinable()) return;
  stop_requested_.store(true, std::memory_order_release);
  inbox_->set_sleeping(true);  // force the wake-up write
  inbox_->wake();
  // A thread stuck inside the provider never ends: once the watchdog gave up on it, leave it.
  while (exited_future_.wait_for(std::chrono::milliseconds(20)) != std::future_status::ready) {
    if (abandoned()) {
      FL_LOG_ERROR("group {}: leaving its worker thread behind, stuck inside the provider", config_.group);
      thread_.detach();
      return;
    }
  }
  thread_.join();
}

Status GroupWorker::run_sync(std::function<Status(GroupWorker&)> fn) {
  // Shared, not on this stack: if the worker is given up on, this call returns while the command
  // may still be answered later (with alive = false; `fn` then never runs).
  auto done = std::make_shared<std::promise<Status>>();
  std::future<Status> result = done->get_future();
  inbox_->post([this, fn = std::move(fn), done](bool alive) {
    if (alive) {
      done->set_value(fn(*this));
    } else {
      done->set_value(abandoned() ? abandon_reason_ : stopped("engine stopped"));
    }
  });
  while (result.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
    if (abandoned()) return abandon_reason_;
  }
  return result.get();
}

Status GroupWorker::open_domains() {
  for (const transport::DomainSpec& spec : config_.domains) {
    Result<std::unique_ptr<transport::Domain>> opened = config_.open_domain(spec);
    if (!opened.ok()) {
      return Status(opened.status().code(), "group " + std::to_string(config_.group) + ", domain " +
                                                std::to_string(domains_.size()) + ": " + opened.status().message());
    }
    DomainState state;
    state.domain = std::make_unique<transport::GuardedDomain>(std::move(opened).value(), guard_);
    const transport::DomainInfo& info = state.domain->info();
    state.max_inflight = info.max_inflight;
    if (config_.max_inflight_per_domain > 0) state.max_inflight = std::min(state.max_inflight, config_.max_inflight_per_domain);
    // Most of the endpoint, not all: a dead peer whose WRs never complete (shm keeps them
    // forever) must leave room for the others.
    state.max_inflight_per_path = std::max<size_t>(1, state.max_inflight - state.max_inflight / 8);
    state.wrs_per_pass = std::max<size_t>(1, info.wrs_per_pass);
    addresses_.push_back(state.domain->address());
    infos_.push_back(info);
    raw_domains_.push_back(state.domain.get());
    domain_counters_.push_back(state.domain->counters());
    domains_.push_back(std::move(state));
  }
  for (size_t d = 1; d < infos_.size(); ++d) {
    if (infos_[d].transport != infos_[0].transport || infos_[d].delivery_complete != infos_[0].delivery_complete) {
      return invalid_argument("the domains of one group must use the same transport and semantics");
    }
  }
  return ok_status();
}

void GroupWorker::thread_main(std::promise<Status>* opened) {
  pthread_setname_np(pthread_self(), ("fl-worker-" + std::to_string(config_.group)).substr(0, 15).c_str());
  Status status = config_.cpu ? pin_to_cpu(*config_.cpu) : ok_status();
  if (status.ok()) status = open_domains();
  if (status.ok()) status = open_control();
  if (!status.ok()) {
    raw_domains_.clear();
    domains_.clear();
    inbox_->close_and_refuse();
    opened->set_value(status);
    return;
  }
  IdleWaiter idle(config_.idle_policy, *inbox_, raw_domains_);
  const std::function<void()> release = [this] { disown(); };
  opened->set_value(ok_status());  // `opened` is gone after this line

  while (!stop_requested_.load(std::memory_order_acquire)) {
    if (!own()) return;  // given up on: the watchdog took everything over
    inbox_->mark_pokes_seen();  // posts by submitters after this keep the worker from sleeping
    bool busy = inbox_->run_commands() > 0;
    busy |= accept_requests();
    busy |= post_recvs_pending();
    bool must_poll = false;
    bool inflight = false;
    for (size_t d = 0; d < domains_.size(); ++d) {
      busy |= post_pending(d);
      busy |= poll_domain(d) > 0;
      must_poll |= !domains_[d].streams.empty() || domains_[d].domain->has_deferred_work();
      inflight |= domains_[d].inflight > 0;
    }
    must_poll |= !recvs_to_post_.empty();
    const int64_t now = monotonic_ns();
    clock_ns_ = now;
    busy |= expire_deadlines(now);
    if (now >= next_sweep_ns_) busy |= sweep_stalls(now);
    busy |= probe_sweep(now);
    // Gives ownership up before it sleeps (or at once, when it spins on): submitters may post.
    idle.after_pass(busy, must_poll, inflight, caller_polls(now), next_timer_ns(now) - now, now, release);
  }
  if (!own()) return;
  shutdown();
  disown();
}

bool GroupWorker::accept_requests() {
  Request* batch[kRequestsPerAccept];
  const size_t n = inbox_->pop_requests(batch, kRequestsPerAccept);
  const int64_t now = n ? monotonic_ns() : 0;
  for (size_t i = 0; i < n; ++i) accept(batch[i], now);
  return n > 0;
}

void GroupWorker::accept(Request* r, int64_t now) {
  {
    live_.emplace(r->id, r);
    if (r->deadline_ns) deadlines_.schedule(r->deadline_ns, {r, r->id});
    if (r->kind == RequestKind::kSend) {
      r->target_peers = {&peers_.for_main_address(r->send_to.bytes())};
      maybe_retry_peer(*r->target_peers[0], now);
      r->unposted = 1;
      domains_[0].streams.push_back({r, 0, 1});
      return;
    }
    if (r->group) {
      r->target_peers = r->group->peers;
    } else {
      r->target_peers.resize(r->targets.size());
      for (size_t t = 0; t < r->targets.size(); ++t) r->target_peers[t] = &peer_for(r->targets[t]);
    }
    for (PeerEntry* p : r->target_peers) maybe_retry_peer(*p, now);
    r->unposted = static_cast<uint32_t>(r->wrs.size());
    for (size_t d = 0; d < domains_.size(); ++d) {
      const uint32_t begin = r->domain_begin[d];
      const uint32_t end = r->domain_begin[d + 1];
      if (begin < end) domains_[d].streams.push_back({r, begin, end});
    }
    maybe_finish(r);  // a request with no WRs (validation prevents it; be safe)
  }
}

namespace {

// The WRITE of planned WR `w` of `r` on domain `e`, into `dst` (its target's registration there).
transport::WriteWr write_wr(const Request& r, const planner::WrPlan& w, const MrDomainEntry& dst, size_t e,
                            transport::PeerHandle peer, WrRecord* record) {
  transport::WriteWr wr;
  if (r.src) {
    wr.src = r.src->ptr + w.src_offset;
    wr.src_desc = r.src->domain_mrs[e].desc;
  }
  wr.length = w.length;
  wr.peer = peer;
  wr.remote_addr = dst.addr_base + w.dst_offset;
  wr.rkey = dst.rkey;
  wr.has_imm = r.has_imm;
  wr.imm = r.imm;
  wr.context = reinterpret_cast<uint64_t>(record);
  return wr;
}

}  // namespace

transport::PostResult GroupWorker::post_one(size_t d, Stream& s, Status* error) {
  Request& r = *s.request;
  const uint32_t target = r.kind == RequestKind::kSend ? 0 : r.wrs[s.next].target;
  PeerEntry& peer = *r.target_peers[target];
  if (peer.health == PeerHealth::kUnreachable) {
    *error = Status(ErrorCode::kPeerUnreachable, peer.last_error.message());
    return transport::PostResult::kFailed;
  }
  // A WR planned for a failed path goes through another domain to the same peer; the peer's
  // domain e takes it, so its imm is counted there just the same.
  std::optional<size_t> routed = r.kind == RequestKind::kSend ? (peer.paths[0].up ? std::optional<size_t>(0) : std::nullopt)
                                                             : route_around(peer, d);
  if (!routed) {
    *error = Status(ErrorCode::kDomainDown, "the path through domain " + std::to_string(d) + " failed");
    return transport::PostResult::kFailed;
  }
  const size_t e = *routed;
  DomainState& ds = domains_[e];
  if (e != d && ds.inflight >= ds.max_inflight) return transport::PostResult::kAgain;
  if (peer.paths[e].inflight >= ds.max_inflight_per_path) return transport::PostResult::kAgain;
  Result<transport::PeerHandle> handle = peers_.handle(peer, e, *ds.domain);
  if (!handle.ok()) {
    *error = Status(ErrorCode::kPeerUnreachable, handle.status().message());
    return transport::PostResult::kFailed;
  }
  WrRecord* record = records_.acquire();
  record->request = &r;
  record->peer = &peer;
  record->domain = static_cast<uint32_t>(e);
  record->op = r.op;
  record->posted_ns = clock_ns_;  // this posting pass's time (metrics on)
  transport::PostResult result;
  if (r.kind == RequestKind::kSend) {
    record->bytes = r.src ? r.send_length : r.message.size();
    result = post_send(r, record, *handle, error);
  } else {
    const planner::WrPlan& w = r.wrs[s.next];
    record->bytes = w.length;
    const transport::WriteWr wr = write_wr(r, w, r.target_desc(w.target).domain(e), e, *handle, record);
    result = ds.domain->post_write(wr, error);
  }
  Path& path = peer.paths[e];
  if (result != transport::PostResult::kPosted) {
    records_.release(record);
    // A path that only ever answers EAGAIN (e.g. a connection that cannot be established) is
    // as stalled as one whose WRs never complete: the stall sweep watches both.
    if (result == transport::PostResult::kAgain && path.blocked_since_ns == 0) path.blocked_since_ns = monotonic_ns();
    return result;
  }
  path.blocked_since_ns = 0;
  note_posted(record, peer, e, 1);
  return result;
}

void GroupWorker::note_posted(WrRecord* record, PeerEntry& peer, size_t e, uint32_t wrs) {
  Path& path = peer.paths[e];
  DomainState& ds = domains_[e];
  record->outstanding = wrs;
  peers_.op_posted(peer, e, wrs);
  if (path.inflight == 0) path.last_progress_ns = monotonic_ns();
  path.inflight += wrs;
  path.wrs.push(record);
  ds.inflight += wrs;
  DomainCells& cells = metrics_.domain(e);
  cells.wrs_posted.add(wrs);
  cells.inflight.set(ds.inflight);
  metrics_.op(record->op).wrs_posted.add(wrs);
  if (peer.metrics) {
    peer.metrics->wrs_posted.add(wrs);
    peer.metrics->inflight.add(wrs);
  }
}

size_t GroupWorker::post_run(size_t d, Stream& s, size_t max_wrs, transport::PostResult* result, Status* error) {
  *result = transport::PostResult::kPosted;
  Request& r = *s.request;
  if (r.kind == RequestKind::kSend || s.end - s.next < 2 || max_wrs < 2) return 0;
  const planner::WrPlan& first = r.wrs[s.next];
  // Scatters and single writes rarely make runs: one look at the next WR says so.
  const planner::WrPlan& second = r.wrs[s.next + 1];
  if (second.target != first.target || second.length != first.length) return 0;
  PeerEntry& peer = *r.target_peers[first.target];
  // Anything unusual (a failed peer, a rerouted path, no handle yet) goes through post_one,
  // which reports it.
  if (peer.health == PeerHealth::kUnreachable || !peer.paths[d].usable()) return 0;
  DomainState& ds = domains_[d];
  Path& path = peer.paths[d];
  if (ds.inflight >= ds.max_inflight || path.inflight >= ds.max_inflight_per_path) return 0;
  size_t room = std::min({max_wrs, ds.max_inflight - ds.inflight, ds.max_inflight_per_path - path.inflight,
                          static_cast<size_t>(s.end - s.next)});
  size_t k = 1;
  while (k < room && r.wrs[s.next + k].target == first.target && r.wrs[s.next + k].length == first.length) ++k;
  if (k < 2) return 0;
  Result<transport::PeerHandle> handle = peers_.handle(peer, d, *ds.domain);
  if (!handle.ok()) return 0;
  WrRecord* record = records_.acquire();
  record->request = &r;
  record->peer = &peer;
  record->domain = static_cast<uint32_t>(d);
  record->op = r.op;
  record->posted_ns = clock_ns_;
  record->bytes = first.length;
  const MrDomainEntry& dst = r.target_desc(first.target).domain(d);
  run_wrs_.resize(k);
  for (size_t i = 0; i < k; ++i) run_wrs_[i] = write_wr(r, r.wrs[s.next + i], dst, d, *handle, record);
  const size_t n = ds.domain->post_writes(std::span<const transport::WriteWr>(run_wrs_.data(), k), result, error);
  if (n == 0) {
    records_.release(record);
    if (*result == transport::PostResult::kAgain && path.blocked_since_ns == 0) path.blocked_since_ns = monotonic_ns();
    return 0;
  }
  path.blocked_since_ns = 0;
  note_posted(record, peer, d, static_cast<uint32_t>(n));
  return n;
}

bool GroupWorker::post_pending(size_t d) {
  DomainState& ds = domains_[d];
  size_t posted = 0;
  if (metrics_.detailed() && !ds.streams.empty()) clock_ns_ = monotonic_ns();
  while (!ds.streams.empty() && ds.inflight < ds.max_inflight && posted < ds.wrs_per_pass) {
    Stream& s = ds.streams.front();
    Request* r = s.request;
    if (r->failed) {  // a failed request posts nothing more
      r->unposted -= s.end - s.next;
      ds.streams.pop_front();
      maybe_finish(r);
      continue;
    }
    Status error;
    transport::PostResult result;
    // A run of WRs in one call where they allow it, else one WR.
    size_t n = post_run(d, s, ds.wrs_per_pass - posted, &result, &error);
    if (n == 0 && result == transport::PostResult::kPosted) {
      result = post_one(d, s, &error);
      n = result == transport::PostResult::kPosted ? 1 : 0;
    }
    if (n > 0) {
      s.next += static_cast<uint32_t>(n);
      r->unposted -= static_cast<uint32_t>(n);
      r->inflight += static_cast<uint32_t>(n);
      posted += n;
      if (!r->first_posted) {
        r->first_posted = true;
        if (r->submit_ns != 0) note_first_post(*r);
      }
    }
    if (result == transport::PostResult::kAgain) break;
    if (result == transport::PostResult::kFailed) {  // the WR after the posted ones was refused
      ++s.next;
      --r->unposted;
      r->fail(std::move(error));
    }
    if (s.next == s.end) ds.streams.pop_front();
    if (result == transport::PostResult::kFailed) maybe_finish(r);
  }
  return posted > 0;
}

size_t GroupWorker::poll_domain(size_t d, size_t max_events) {
  events_.clear();
  const size_t n = domains_[d].domain->poll(events_, std::min(max_events, domains_[d].wrs_per_pass));
  if (n > 0) clock_ns_ = monotonic_ns();  // the completion time of this batch's events
  for (transport::Event& ev : events_) {
    switch (ev.kind) {
      case transport::EventKind::kWriteDone:
      case transport::EventKind::kSendDone:
        on_wr_done(reinterpret_cast<WrRecord*>(ev.context), ev);
        break;
      case transport::EventKind::kRecvDone:
        on_recv(reinterpret_cast<RecvSlot*>(ev.context), ev);
        break;
      case transport::EventKind::kImm:
        metrics_.domain(d).imms_received.add();
        imms_.add(ev.imm);
        break;
      case transport::EventKind::kRemoteError:
        FL_LOG_WARN("group {} domain {}: {}", config_.group, d, ev.status.to_string());
        break;
      case transport::EventKind::kControlSendDone:
        on_control_send_done(d, ev.context);
        break;
      case transport::EventKind::kControlRecvDone:
        on_control_recv(d, ev.context, ev);
        break;
    }
  }
  return n;
}

void GroupWorker::on_wr_done(WrRecord* record, transport::Event& ev) {
  PeerEntry& peer = *record->peer;
  const size_t e = record->domain;
  // One event reports ev.count WRs of the record (1, or several of a run's); a run's record
  // lives until the last of its WRs is reported.
  const uint32_t n = std::clamp<uint32_t>(ev.count, 1, record->outstanding);
  peers_.op_done(peer, e, *domains_[e].domain, n);
  domains_[e].inflight -= n;
  metrics_.domain(e).inflight.set(domains_[e].inflight);
  record->outstanding -= n;
  const bool last_of_record = record->outstanding == 0;
  if (record->abandoned) {  // its path failed earlier (and counted it); the request no longer waits for it
    if (last_of_record) records_.release(record);
    return;
  }
  Request* r = record->request;
  Path& path = peer.paths[e];
  if (last_of_record) path.wrs.erase(record);
  path.inflight -= n;
  path.last_progress_ns = clock_ns_;
  count_wr_end(record->op, peer, e, ev.status.code(), record->bytes, record->posted_ns, n);
  if (last_of_record) records_.release(record);
  if (r->kind == RequestKind::kSend && r->send_slot >= 0) {
    send_slots_.release(r->send_slot);
    r->send_slot = -1;
  }
  r->inflight -= n;
  if (!ev.status.ok()) {
    const bool path_error = ev.status.code() == ErrorCode::kPeerUnreachable;
    r->fail(ev.status);
    // A connection-level error condemns the path (and abandons its other WRs, a run's others
    // included), not just this WR. path_failed() finishes the requests whose WRs it abandons,
    // and `r` may be one of them (a paged write has several WRs on the path): hold it meanwhile
    // so it is finished once, here.
    if (path_error && path.up) {
      ++r->inflight;
      path_failed(peer, e, ev.status);
      --r->inflight;
    }
  }
  maybe_finish(r);
}

Status GroupWorker::cancel(uint64_t id) {
  while (accept_requests()) {  // a request still in the inbox is cancelled too
  }
  auto it = live_.find(id);
  if (it == live_.end() || it->second->delivered) {
    return not_found("request " + std::to_string(id) + " is not in flight (it completed, or was never submitted)");
  }
  Request* r = it->second;
  // Its first outcome wins: a request that already failed keeps that error.
  r->fail(cancelled("request " + std::to_string(id) + " cancelled"));
  // WRs not yet posted are dropped now; posted ones complete (and are absorbed) before it ends.
  for (DomainState& ds : domains_) {
    for (auto s = ds.streams.begin(); s != ds.streams.end();) {
      if (s->request != r) {
        ++s;
        continue;
      }
      r->unposted -= s->end - s->next;
      s = ds.streams.erase(s);
    }
  }
  maybe_finish(r);
  return ok_status();
}

void GroupWorker::maybe_finish(Request* r) {
  if (r->unposted != 0 || r->inflight != 0) return;
  if (!r->delivered) deliver(r, r->failed ? r->error : ok_status());
  live_.erase(r->id);
  config_.requests->release(r);
}

void GroupWorker::deliver(Request* r, const Status& status, bool on_owner) {
  r->delivered = true;
  OpCells& cells = metrics_.op(r->op);
  if (status.ok()) {
    cells.requests_completed.add();
  } else {
    cells.requests_failed[static_cast<size_t>(status.code())].add();
  }
  // Timed by the worker's latest clock read (this pass's poll or post): no clock read per request.
  if (on_owner && r->submit_ns != 0 && metrics_.detailed()) cells.request_latency.record(clock_ns_ - r->submit_ns);
  dispatcher_.deliver(std::move(r->completion), status);
}

void GroupWorker::note_first_post(const Request& r) {
  // Benchmarks recording submit latency read the clock for it; metrics use the pass's clock.
  const int64_t now = config_.record_submit_latency ? monotonic_ns() : clock_ns_;
  if (config_.record_submit_latency && submit_latencies_.size() < kMaxLatencySamples) {
    submit_latencies_.push_back(static_cast<uint32_t>(std::min<int64_t>(now - r.submit_ns, UINT32_MAX)));
  }
  if (metrics_.detailed()) metrics_.op(r.op).submit_to_post.record(now - r.submit_ns);
}

void GroupWorker::count_wr_end(uint8_t op, const PeerEntry& peer, size_t e, ErrorCode code, uint64_t bytes,
                               int64_t posted_ns, uint32_t wrs) {
  OpCells& op_cells = metrics_.op(op);
  DomainCells& domain_cells = metrics_.domain(e);
  PeerCells* peer_cells = peer.metrics;
  if (code == ErrorCode::kOk) {
    op_cells.wrs_completed.add(wrs);
    domain_cells.wrs_completed.add(wrs);
    domain_cells.bytes_written.add(bytes * wrs);
  } else {
    op_cells.wrs_failed[static_cast<size_t>(code)].add(wrs);
    domain_cells.wrs_failed.add(wrs);
  }
  if (!peer_cells) return;
  peer_cells->inflight.sub(wrs);
  if (code == ErrorCode::kOk) {
    peer_cells->wrs_completed.add(wrs);
    peer_cells->bytes_written.add(bytes * wrs);
    // One sample per WR; WRs reported together finished together.
    if (posted_ns != 0) peer_cells->wr_latency.record(clock_ns_ - posted_ns, wrs);
  } else {
    peer_cells->wrs_failed.add(wrs);
  }
}

// Callers already have their Cancelled; give the provider a moment to finish what it holds
// before the endpoints close. Two libfabric 1.17 faults make this necessary:
//   - shm crashes a *peer* whose pending operations point into an endpoint that vanished: so
//     our own WRs drain first;
//   - tcp;ofi_rxm crashes the *receiver* when a connection closes in the middle of an incoming
//     write with immediate data (tcpx reports the half-received write as FI_ECANCELED with a null
//     context, which rxm dereferences): so after our WRs, we keep receiving until the peers'
//     writes to us have been quiet for kShutdownQuietNs, and a peer that stops at the same time
//     (both sides draining) closes between whole writes.
// Bounded, so a dead or endlessly writing peer cannot hold stop() up.
void GroupWorker::drain_before_close() {
  for (DomainState& ds : domains_) ds.streams.clear();
  const int64_t deadline = monotonic_ns() + kShutdownDrainNs;
  auto busy = [&] {
    for (const DomainState& ds : domains_) {
      if (ds.inflight > 0) return true;
    }
    return false;
  };
  int64_t last_event = monotonic_ns();
  for (int64_t now = last_event; now < deadline; now = monotonic_ns()) {
    if (!busy() && now - last_event >= kShutdownQuietNs) break;
    bool any = false;
    for (size_t d = 0; d < domains_.size(); ++d) any |= poll_domain(d) > 0;
    if (any) {
      last_event = monotonic_ns();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
}

void GroupWorker::shutdown() {
  inbox_->run_commands();
  while (accept_requests()) {
  }
  const Status why = cancelled("engine stopped");
  for (auto& [id, r] : live_) {
    if (!r->delivered) deliver(r, why);
  }
  for (const auto& pool : recv_pools_) {
    if (pool->on_error) dispatcher_.post([pool, why] { pool->on_error(why); });
  }
  inbox_->close_and_refuse();
  drain_before_close();
  // Closing the endpoints ends every outstanding WR; only then may requests and buffers go.
  for (DomainState& ds : domains_) {
    ds.streams.clear();
    ds.domain.reset();
  }
  raw_domains_.clear();
  control_.clear();
  for (auto& [id, r] : live_) config_.requests->release(r);
  live_.clear();
}

}  // namespace fabric_lib::detail

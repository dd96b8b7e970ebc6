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
  if (config_.record_submit_latency) {
    submit_latencies_.reserve(kLatencyReserve);
    posting_times_.reserve(kLatencyReserve);
  }
}

void GroupWorker::add_stats(EngineStats& s) const {
  metrics_.add_totals(s);
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
    DomainState state(&pool_);
    state.domain = std::make_unique<transport::GuardedDomain>(std::move(opened).value(), guard_);
    const transport::DomainInfo& info = state.domain->info();
    state.max_inflight = info.max_inflight;
    if (config_.max_inflight_per_domain > 0) state.max_inflight = std::min(state.max_inflight, config_.max_inflight_per_domain);
    // Most of the endpoint, not all: a dead peer whose WRs never complete (shm keeps them
    // forever) must leave room for the others.
    state.max_inflight_per_path = std::max<size_t>(1, state.max_inflight - state.max_inflight / 8);
    state.wrs_per_pass = std::max<size_t>(1, info.wrs_per_pass);
    // Set before start() returns (the promise orders it before any submit reads it).
    if (info.calls_may_hang_on_dead_peer && !config_.trust_provider_calls) config_.post_on_caller = false;
    addresses_.push_back(state.domain->address());
    infos_.push_back(info);
    raw_domains_.push_back(state.domain.get());
    domain_counters_.push_back(state.domain->counters());
    domains_.push_back(std::move(state));
  }
  accept_between_polls_ = !infos_.empty() && !infos_[0].posts_issued_by_poll;
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

  int64_t last_pass_ns = monotonic_ns();
  while (!stop_requested_.load(std::memory_order_acquire)) {
    // An application thread drives progress() and holds the group right now: stand by rather
    // than spin for the ownership it is about to take again (IdleWaiter::after_pass says why).
    if (caller_polls(last_pass_ns) && owner_.load(std::memory_order_relaxed)) {
      if (abandoned()) return;
      idle.nap(IdleWaiter::kSpinBudget.count() * 1000);
      last_pass_ns = monotonic_ns();
      continue;
    }
    if (!own()) return;  // given up on: the watchdog took everything over
    // The pass's one clock read (perf put a quarter of an idle spinning worker's time in
    // clock_gettime): posts, timers and the idle policy use it; a poll that returns events reads
    // the clock again for their completion time.
    const int64_t now = monotonic_ns();
    clock_ns_ = now;
    last_pass_ns = now;
    inbox_->mark_pokes_seen();  // posts by submitters after this keep the worker from sleeping
    bool busy = inbox_->run_commands() > 0;
    busy |= accept_requests(now);
    busy |= post_recvs_pending();
    bool must_poll = false;
    bool inflight = false;
    // Every domain's posts before any poll: a backend whose poll issues what was posted (the ipc
    // backend's GPU copies, shared by a group's domains) then issues a whole pass at once.
    for (size_t d = 0; d < domains_.size(); ++d) busy |= post_pending(d);
    // While an application thread drives progress(), it reaps: a worker that polled too would
    // find work on every wake-up, nap at its shortest back-off and take the group's ownership
    // from that thread again and again (perf on 2 cores: a third of the samples on the worker,
    // the submitter spinning for ownership in post_on_caller). The worker keeps what only it
    // does — queued requests, commands, timers — and polls again once the caller stops.
    const bool caller_reaps = caller_polls(now);
    for (size_t d = 0; d < domains_.size(); ++d) {
      if (!caller_reaps) busy |= poll_domain(d) > 0;
      // A request that arrived during that poll is posted now, not after the other domains'
      // polls: on tcp one fi_cq_read does the socket work and takes ~1.7 us even when it finds
      // nothing, so with 4 domains a submit waited up to four of them.
      // Not where the posts wait for a poll anyway (DomainInfo::posts_issued_by_poll).
      if (accept_between_polls_ && d + 1 < domains_.size() && inbox_->has_requests()) busy |= accept_and_post(monotonic_ns());
    }
    for (size_t d = 0; d < domains_.size(); ++d) {
      must_poll |= !domains_[d].streams.empty() || domains_[d].domain->has_deferred_work();
      inflight |= domains_[d].inflight > 0;
    }
    must_poll |= !recvs_to_post_.empty();
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

bool GroupWorker::accept_requests(int64_t now) {
  Request* batch[kRequestsPerAccept];
  const size_t n = inbox_->pop_requests(batch, kRequestsPerAccept);
  for (size_t i = 0; i < n; ++i) accept(batch[i], now);
  return n > 0;
}

bool GroupWorker::accept_and_post(int64_t now) {
  clock_ns_ = now;
  bool busy = accept_requests(now);
  for (size_t d = 0; d < domains_.size(); ++d) busy |= post_pending(d);
  return busy;
}

void GroupWorker::link_live(Request* r) {
  r->live_id.store(r->id, std::memory_order_relaxed);
  r->live_prev = nullptr;
  r->live_next = live_head_;
  if (live_head_) live_head_->live_prev = r;
  live_head_ = r;
}

void GroupWorker::unlink_live(Request* r) {
  if (r->live_prev) {
    r->live_prev->live_next = r->live_next;
  } else {
    live_head_ = r->live_next;
  }
  if (r->live_next) r->live_next->live_prev = r->live_prev;
  r->live_prev = r->live_next = nullptr;
  r->live_id.store(0, std::memory_order_relaxed);
}

void GroupWorker::accept(Request* r, int64_t now) {
  {
    link_live(r);
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
      // push_back into the recycled request's capacity stays inline; resize() from empty called
      // out of line on every submit.
      r->target_peers.clear();
      for (const MrDesc& t : r->targets) r->target_peers.push_back(&peer_for(t));
    }
    for (PeerEntry* p : r->target_peers) maybe_retry_peer(*p, now);
    r->unposted = r->num_wrs();
    if (r->paged) {
      for (const planner::PageRun& run : r->page_runs) {
        if (run.begin < run.end) domains_[run.domain].streams.push_back({r, run.begin, run.end});
      }
    } else if (r->grouped_by_domain()) {
      for (size_t d = 0; d < domains_.size(); ++d) {
        const uint32_t begin = r->domain_begin[d];
        const uint32_t end = r->domain_begin[d + 1];
        if (begin < end) domains_[d].streams.push_back({r, begin, end});
      }
    } else {  // not grouped: every WR on the first one's domain (one WR, most often)
      domains_[r->wrs[0].domain].streams.push_back({r, 0, static_cast<uint32_t>(r->wrs.size())});
    }
    maybe_finish(r);  // a request with no WRs (validation prevents it; be safe)
  }
}

size_t GroupWorker::poll_domain(size_t d, size_t max_events, bool clock_fresh) {
  events_.clear();
  const size_t n = domains_[d].domain->poll(events_, std::min(max_events, domains_[d].wrs_per_pass));
  if (n > 0 && !clock_fresh) clock_ns_ = monotonic_ns();  // the completion time of this batch's events
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
        // One event may report several arrivals of one imm (Event::count).
        metrics_.domain(d).imms_received.add(std::max<uint32_t>(ev.count, 1));
        imms_.add(ev.imm, std::max<uint32_t>(ev.count, 1));
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
      // On one medium (DomainInfo::one_medium: the ipc backend, where every path reaches the
      // same peer process) a connection-level error is the peer's, not one path's: all of its
      // paths go down at once. Otherwise a one-medium group, whose default-routed requests all
      // go through domain 0, left the peer Degraded with paths 1..N-1 "up" until traffic tried them.
      if (infos_[0].one_medium) {
        peer_unreachable(peer, ev.status);
      } else {
        path_failed(peer, e, ev.status);
      }
      --r->inflight;
    }
  }
  maybe_finish(r);
}

Status GroupWorker::cancel(uint64_t id) {
  while (accept_requests(monotonic_ns())) {  // a request still in the inbox is cancelled too
  }
  // The id's slot names the request; it is still this transfer while it is live under this id.
  Request* r = config_.requests->at(RequestPool::split(id).slot);
  if (!r || r->live_id.load(std::memory_order_relaxed) != id || r->delivered) {
    return not_found("request " + std::to_string(id) + " is not in flight (it completed, or was never submitted)");
  }
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
  unlink_live(r);
  config_.requests->release(r);
}

void GroupWorker::deliver(Request* r, const Status& status, bool on_owner) {
  r->delivered = true;
  OpCells& cells = metrics_.op(r->op);
  if (status.ok()) {
    if (on_owner) {
      cells.requests_completed_by_owner.add();
    } else {
      cells.requests_completed_off_owner.add();
    }
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

void GroupWorker::note_all_posted(const Request& r) {
  if (!config_.record_submit_latency || posting_times_.size() >= kMaxLatencySamples) return;
  posting_times_.push_back(static_cast<uint32_t>(std::min<int64_t>(monotonic_ns() - r.submit_ns, UINT32_MAX)));
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
  while (accept_requests(monotonic_ns())) {
  }
  const Status why = cancelled("engine stopped");
  for_each_live([&](Request* r) {
    if (!r->delivered) deliver(r, why);
  });
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
  for_each_live([&](Request* r) {
    unlink_live(r);
    config_.requests->release(r);
  });
}

}  // namespace fabric_lib::detail

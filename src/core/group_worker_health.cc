// GroupWorker: deadlines, path and peer failure, stall detection, recovery, and health status.
//
// The rule (docs/failure-semantics.md, "Paths and peers"): when a path (local domain d <-> the peer's domain d)
// fails, the WRs already handed to the provider on it are not re-posted — we cannot know
// whether they landed, and a second copy would count its imm twice — so their requests fail
// (DomainDown, or PeerUnreachable when no path is left). WRs not yet posted that were planned
// for d go through another working domain to the same peer, still carrying their imm, so the
// receiver's count imm_count_of(request, N) is unchanged.
#include <algorithm>

#include "core/group_worker.h"
#include "base/log.h"

namespace fabric_lib::detail {
namespace {

constexpr int64_t kMaxSweepIntervalNs = 10'000'000;  // 10 ms
constexpr int64_t kIdleHorizonNs = 1'000'000'000;

std::string ms_text(int64_t ns) { return std::to_string(ns / 1'000'000) + " ms"; }

}  // namespace

bool GroupWorker::expire_deadlines(int64_t now) {
  bool any = false;
  deadlines_.pop_due(now, [&](const DeadlineEntry& e) {
    // Requests are never freed while the engine lives (RequestPool), so the pointer is safe; the
    // deadline is still this request's while it is live under the same id.
    Request* r = e.request;
    if (r->live_id.load(std::memory_order_relaxed) != e.id || r->delivered) return;  // moved on
    if (!r->failed) r->fail(Status(ErrorCode::kDeadlineExceeded, "request passed its deadline"));
    metrics_.events().deadlines_exceeded.add();
    // Delivered now; unposted WRs are dropped by post_pending and late completions are absorbed
    // until the request's last WR is accounted for.
    deliver(r, r->error);
    any = true;
  });
  return any;
}

bool GroupWorker::sweep_stalls(int64_t now) {
  const int64_t stall = config_.stall_timeout_ns;
  int64_t interval = kMaxSweepIntervalNs;
  if (stall > 0) interval = std::min(interval, std::max<int64_t>(stall / 4, 1'000'000));
  next_sweep_ns_ = now + interval;
  if (stall <= 0) return false;
  bool any = false;
  peers_.for_each([&](PeerEntry& peer) {
    for (size_t d = 0; d < peer.paths.size(); ++d) {
      const Path& path = peer.paths[d];
      if (!path.up) continue;
      if (path.inflight > 0 && now - path.last_progress_ns > stall) {
        metrics_.events().stalls_detected.add();
        path_failed(peer, d, Status(ErrorCode::kPeerUnreachable,
                                    "no completion on domain " + std::to_string(d) + " for " + ms_text(now - path.last_progress_ns)));
        any = true;
      } else if (path.blocked_since_ns != 0 && now - path.blocked_since_ns > stall) {
        metrics_.events().stalls_detected.add();
        path_failed(peer, d, Status(ErrorCode::kPeerUnreachable, "the provider refused WRs on domain " + std::to_string(d) +
                                                                     " for " + ms_text(now - path.blocked_since_ns)));
        any = true;
      }
    }
  });
  return any;
}

void GroupWorker::path_failed(PeerEntry& peer, size_t d, const Status& why) {
  Path& path = peer.paths[d];
  if (!path.up) return;
  path.up = false;
  metrics_.events().path_failures.add();
  if (peer.metrics) peer.metrics->path_failures.add();
  // The peer's last path — or one that peer_unreachable() takes down with a peer it already
  // marked (its WRs fail as the peer's, and the peer is not downgraded to Degraded meanwhile).
  const bool last = peer.paths_up() == 0 || peer.health == PeerHealth::kUnreachable;
  const Status failure(last ? ErrorCode::kPeerUnreachable : ErrorCode::kDomainDown,
                       "domain " + std::to_string(d) + " to this peer failed: " + why.message());
  FL_LOG_WARN("group {}: {}", config_.group, failure.message());

  // Abandon the WRs in flight on the path: their requests stop waiting for them. A request may
  // have several of them, so finish requests only after all are accounted for.
  std::vector<Request*> affected;
  for (WrRecord* rec = path.wrs.head(); rec != nullptr;) {
    WrRecord* next = rec->next;
    path.wrs.erase(rec);
    rec->abandoned = true;  // released when (if ever) the provider reports its last WR
    Request* r = rec->request;
    r->inflight -= rec->outstanding;  // the domain keeps counting them until the provider gives them back
    count_wr_end(rec->op, peer, d, failure.code(), 0, 0, rec->outstanding);
    if (r->kind == RequestKind::kSend && r->send_slot >= 0) {
      send_slots_.release(r->send_slot);
      r->send_slot = -1;
    }
    r->fail(failure);
    affected.push_back(r);
    rec = next;
  }
  path.inflight = 0;
  path.blocked_since_ns = 0;
  std::sort(affected.begin(), affected.end());
  affected.erase(std::unique(affected.begin(), affected.end()), affected.end());
  for (Request* r : affected) maybe_finish(r);

  // The next use of this path inserts the peer afresh (a new connection where there is one).
  peers_.drop_handle(peer, d, *domains_[d].domain);
  if (last) {
    peer_unreachable(peer, failure);  // reports the peer
  } else {
    peer.health = PeerHealth::kDegraded;
  }
  report(peer, static_cast<int>(d), false, failure);
}

void GroupWorker::peer_unreachable(PeerEntry& peer, const Status& why) {
  if (peer.health == PeerHealth::kUnreachable) return;
  peer.health = PeerHealth::kUnreachable;
  peer.unreachable_since_ns = monotonic_ns();
  peer.last_error = Status(ErrorCode::kPeerUnreachable, why.message());
  metrics_.events().peers_unreachable.add();
  if (peer.metrics) peer.metrics->times_unreachable.add();
  for (size_t d = 0; d < peer.paths.size(); ++d) {
    Path& path = peer.paths[d];
    if (path.up && path.inflight > 0) {
      path_failed(peer, d, why);
    } else {
      path.up = false;  // unused paths go down with the peer, quietly
    }
  }
  report(peer, -1, false, peer.last_error);
}

void GroupWorker::path_recovered(PeerEntry& peer, size_t d) {
  Path& path = peer.paths[d];
  if (path.up) return;
  path.up = true;
  path.probe_misses = 0;
  path.last_progress_ns = monotonic_ns();
  metrics_.events().path_recoveries.add();
  if (peer.metrics) peer.metrics->path_recoveries.add();
  if (peer.health == PeerHealth::kUnreachable) peer.last_error = ok_status();
  peer.health = peer.paths_up() == peer.paths.size() ? PeerHealth::kHealthy : PeerHealth::kDegraded;
  report(peer, static_cast<int>(d), true, ok_status());
}

std::optional<size_t> GroupWorker::route_around(const PeerEntry& peer, size_t d) const {
  const size_t n = peer.paths.size();
  if (d < n && peer.paths[d].usable()) return d;  // the common case, without the loop's divisions
  for (size_t k = d < n ? 1 : 0; k < n; ++k) {
    const size_t e = (d + k) % n;
    if (peer.paths[e].usable()) return e;
  }
  return std::nullopt;
}

void GroupWorker::maybe_retry_peer(PeerEntry& peer, int64_t now) {
  if (peer.health != PeerHealth::kUnreachable || now - peer.unreachable_since_ns < config_.peer_retry_ns) return;
  for (size_t d = 0; d < peer.paths.size(); ++d) {
    Path& path = peer.paths[d];
    peers_.drop_handle(peer, d, *domains_[d].domain);
    path.up = true;
    path.probe_seq = 0;
    path.probe_misses = 0;
    path.recovery_probes = 0;
  }
  peer.health = PeerHealth::kHealthy;
  metrics_.events().peer_retries.add();
  if (peer.metrics) peer.metrics->retries.add();
  report(peer, -1, true, Status(ErrorCode::kPeerUnreachable, "retrying a peer that was unreachable: " + peer.last_error.message()));
  peer.last_error = ok_status();
}

void GroupWorker::note_health(const PeerEntry& peer) {
  if (!peer.metrics) return;
  peer.metrics->health.store(static_cast<uint8_t>(peer.health), std::memory_order_relaxed);
  uint32_t up = 0;
  for (const Path& p : peer.paths) up += p.up ? 1 : 0;
  peer.metrics->paths_up.store(up, std::memory_order_relaxed);
}

void GroupWorker::report(const PeerEntry& peer, int domain, bool up, const Status& reason) {
  note_health(peer);
  if (!config_.on_health_event) return;
  HealthEvent event;
  event.group = config_.group;
  Result<DomainAddress> address = DomainAddress::from_bytes(peer.key);
  if (address.ok()) event.peer = *address;
  event.domain = domain;
  event.up = up;
  event.health = peer.health;
  event.reason = reason;
  dispatcher_.post([cb = config_.on_health_event, event] { cb(event); });
}

int64_t GroupWorker::next_timer_ns(int64_t now) const {
  int64_t next = now + kIdleHorizonNs;
  if (std::optional<int64_t> due = deadlines_.next_ns()) next = std::min(next, *due);
  bool inflight = false;
  for (const DomainState& ds : domains_) inflight |= ds.inflight > 0;
  bool pending = inflight;
  for (const DomainState& ds : domains_) pending |= !ds.streams.empty();
  if (pending && config_.stall_timeout_ns > 0) next = std::min(next, next_sweep_ns_);
  if (config_.probe_interval_ns > 0 && !control_.empty()) next = std::min(next, std::max(next_probe_ns_, now));
  return std::max(next, now);
}

std::vector<PeerStatus> GroupWorker::peer_status() {
  std::vector<PeerStatus> out;
  peers_.for_each([&](PeerEntry& peer) {
    PeerStatus s;
    Result<DomainAddress> address = DomainAddress::from_bytes(peer.key);
    if (address.ok()) s.address = *address;
    s.health = peer.health;
    for (const Path& p : peer.paths) {
      s.paths_up.push_back(p.up);
      s.inflight += p.inflight;
    }
    s.last_error = peer.last_error;
    out.push_back(std::move(s));
  });
  return out;
}

Status GroupWorker::resolve_all_paths(PeerEntry& peer) {
  for (size_t d = 0; d < domains_.size(); ++d) {
    Result<transport::PeerHandle> h = peers_.handle(peer, d, *domains_[d].domain);
    if (!h.ok()) return h.status();
  }
  return ok_status();
}

void GroupWorker::forget_peer(const MrDesc& desc) {
  PeerEntry* peer = peers_.find(desc.domain(0).address.bytes());
  if (!peer) return;
  for (size_t d = 0; d < domains_.size(); ++d) {
    peers_.drop_handle(*peer, d, *domains_[d].domain);
    peer->paths[d].up = true;
    peer->paths[d].probe_seq = 0;
    peer->paths[d].probe_misses = 0;
    peer->paths[d].recovery_probes = 0;
  }
  peer->health = PeerHealth::kHealthy;
  peer->last_error = ok_status();
  note_health(*peer);
}

}  // namespace fabric_lib::detail

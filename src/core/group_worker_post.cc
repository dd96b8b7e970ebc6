// GroupWorker: posting — a domain's queued WRs handed to the provider, one at a time
// (post_one), as runs (post_run: a request's WRs to one peer, of one length, on a domain's own
// path, in one Domain::post_writes call with one WrRecord counting them) or as batches
// (post_batch: a scatter's WRs to any peers, a record each, in one Domain::post_writes call —
// one watchdog bracket), within the pass budget (post_pending).
#include <algorithm>

#include "base/mr_desc_fields.h"
#include "core/group_worker.h"

namespace fabric_lib::detail {

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
  wr.imm_count = r.imm_count;
  wr.imm = r.imm;
  wr.context = reinterpret_cast<uint64_t>(record);
  return wr;
}

}  // namespace

WrRecord* GroupWorker::new_record(Request& r, PeerEntry& peer, size_t e) {
  WrRecord* record = records_.acquire();
  record->request = &r;
  record->peer = &peer;
  record->domain = static_cast<uint32_t>(e);
  record->op = r.op;
  record->posted_ns = clock_ns_;  // this posting pass's time (metrics on)
  return record;
}

transport::PostResult GroupWorker::post_one(size_t d, Stream& s, Status* error) {
  Request& r = *s.request;
  const uint32_t target = r.kind == RequestKind::kSend ? 0 : r.target_at(s.next);
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
  WrRecord* record = new_record(r, peer, e);
  transport::PostResult result;
  if (r.kind == RequestKind::kSend) {
    record->bytes = r.src ? r.send_length : r.message.size();
    result = post_send(r, record, *handle, error);
  } else {
    const planner::WrPlan w = r.plan_at(s.next);
    record->bytes = w.length;
    const transport::WriteWr wr = write_wr(r, w, MrDescFields::domain(r.target_desc(w.target), e), e, *handle, record);
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
  note_posted_on_path(record, peer, e, wrs);
  count_posted(e, record->op, wrs);
}

void GroupWorker::note_posted_on_path(WrRecord* record, PeerEntry& peer, size_t e, uint32_t wrs) {
  Path& path = peer.paths[e];
  record->outstanding = wrs;
  peers_.op_posted(peer, e, wrs);
  if (path.inflight == 0) path.last_progress_ns = clock_ns_;  // the posting thread's fresh clock read
  path.inflight += wrs;
  path.wrs.push(record);
  domains_[e].inflight += wrs;
  if (peer.metrics) {
    peer.metrics->wrs_posted.add(wrs);
    peer.metrics->inflight.add(wrs);
  }
}

void GroupWorker::count_posted(size_t e, uint8_t op, uint32_t wrs) {
  DomainCells& cells = metrics_.domain(e);
  cells.wrs_posted.add(wrs);
  cells.inflight.set(domains_[e].inflight);
  metrics_.op(op).wrs_posted.add(wrs);
}

size_t GroupWorker::post_run(size_t d, Stream& s, size_t max_wrs, transport::PostResult* result, Status* error) {
  *result = transport::PostResult::kPosted;
  Request& r = *s.request;
  if (r.kind == RequestKind::kSend || s.end - s.next < 2 || max_wrs < 2) return 0;
  // A paged write's pages are one run by construction (one target, one length); scatters and
  // single writes rarely make runs: one look at the next WR says so.
  const uint32_t target = r.target_at(s.next);
  const uint64_t length = r.paged ? r.geometry.page_length : r.wrs[s.next].length;
  if (!r.paged && (r.wrs[s.next + 1].target != target || r.wrs[s.next + 1].length != length)) return 0;
  PeerEntry& peer = *r.target_peers[target];
  // Anything unusual (a failed peer, a rerouted path, no handle yet) goes through post_one,
  // which reports it.
  if (peer.health == PeerHealth::kUnreachable || !peer.paths[d].usable()) return 0;
  DomainState& ds = domains_[d];
  Path& path = peer.paths[d];
  if (ds.inflight >= ds.max_inflight || path.inflight >= ds.max_inflight_per_path) return 0;
  size_t room = std::min({max_wrs, ds.max_inflight - ds.inflight, ds.max_inflight_per_path - path.inflight,
                          static_cast<size_t>(s.end - s.next)});
  size_t k = r.paged ? room : 1;
  while (k < room && r.wrs[s.next + k].target == target && r.wrs[s.next + k].length == length) ++k;
  if (k < 2) return 0;
  Result<transport::PeerHandle> handle = peers_.handle(peer, d, *ds.domain);
  if (!handle.ok()) return 0;
  WrRecord* record = new_record(r, peer, d);
  record->bytes = length;
  const MrDomainEntry& dst = MrDescFields::domain(r.target_desc(target), d);
  size_t n = 0;
  if (r.paged) {
    // The page list itself: no WriteWr per page on this side (Domain::post_pages).
    transport::PageRunWr run;
    run.src = r.src->ptr + r.geometry.src_offset;
    run.src_desc = r.src->domain_mrs[d].desc;
    run.peer = *handle;
    run.remote_addr = dst.addr_base + r.geometry.dst_offset;
    run.rkey = dst.rkey;
    run.page_length = length;
    run.src_stride = r.geometry.src_stride;
    run.dst_stride = r.geometry.dst_stride;
    run.src_pages = r.src_pages.data() + s.next;
    run.dst_pages = r.dst_pages.data() + s.next;
    run.count = k;
    run.has_imm = r.has_imm;
    run.imm = r.imm;
    run.context = reinterpret_cast<uint64_t>(record);
    run.largest_known = true;
    run.largest_src_page = r.largest_src_page;
    run.largest_dst_page = r.largest_dst_page;
    n = ds.domain->post_pages(run, result, error);
  } else {
    run_wrs_.resize(k);
    for (size_t i = 0; i < k; ++i) run_wrs_[i] = write_wr(r, r.wrs[s.next + i], dst, d, *handle, record);
    n = ds.domain->post_writes(std::span<const transport::WriteWr>(run_wrs_.data(), k), result, error);
  }
  if (n == 0) {
    records_.release(record);
    if (*result == transport::PostResult::kAgain && path.blocked_since_ns == 0) path.blocked_since_ns = monotonic_ns();
    return 0;
  }
  path.blocked_since_ns = 0;
  note_posted(record, peer, d, static_cast<uint32_t>(n));
  return n;
}

size_t GroupWorker::post_batch(size_t d, Stream& s, size_t max_wrs, transport::PostResult* result, Status* error) {
  *result = transport::PostResult::kPosted;
  Request& r = *s.request;
  // A request's first WR goes out alone and at once (post_one), before the rest are built: the
  // first byte leaves as early as it did WR by WR.
  if (r.kind == RequestKind::kSend || !r.first_posted || s.end - s.next < 2 || max_wrs < 2) return 0;
  DomainState& ds = domains_[d];
  const size_t room = std::min({max_wrs, ds.max_inflight - std::min(ds.inflight, ds.max_inflight),
                                static_cast<size_t>(s.end - s.next), ds.batch_wrs});
  if (room < 2) return 0;
  // Each WR is checked as post_one checks it on its planned path; the batch ends before the
  // first that post_one must handle (an unreachable peer, a failed path, a full path, no
  // handle). A path's WRs in the batch are counted in its `inflight` while it is built, so its
  // limit holds across them, and taken out again before note_posted counts the posted ones.
  if (run_wrs_.size() < room) run_wrs_.resize(room);
  if (batch_records_.size() < room) batch_records_.resize(room);
  size_t k = 0;
  for (; k < room; ++k) {
    const uint32_t i = s.next + static_cast<uint32_t>(k);
    const uint32_t target = r.target_at(i);
    PeerEntry& peer = *r.target_peers[target];
    Path& path = peer.paths[d];
    if (peer.health == PeerHealth::kUnreachable || !path.usable() || path.inflight >= ds.max_inflight_per_path) break;
    Result<transport::PeerHandle> handle = peers_.handle(peer, d, *ds.domain);
    if (!handle.ok()) break;
    WrRecord* record = new_record(r, peer, d);
    const planner::WrPlan w = r.plan_at(i);
    record->bytes = w.length;
    run_wrs_[k] = write_wr(r, w, MrDescFields::domain(r.target_desc(w.target), d), d, *handle, record);
    batch_records_[k] = record;
    ++path.inflight;
  }
  for (size_t j = 0; j < k; ++j) --batch_records_[j]->peer->paths[d].inflight;
  size_t n = 0;
  if (k >= 2) n = ds.domain->post_writes(std::span<const transport::WriteWr>(run_wrs_.data(), k), result, error);
  for (size_t j = 0; j < n; ++j) {
    WrRecord* record = batch_records_[j];
    record->peer->paths[d].blocked_since_ns = 0;
    note_posted_on_path(record, *record->peer, d, 1);
  }
  if (n > 0) count_posted(d, r.op, static_cast<uint32_t>(n));  // the batch's WRs are all r's
  if (n < k && k >= 2 && *result == transport::PostResult::kAgain) {
    Path& path = batch_records_[n]->peer->paths[d];
    if (path.blocked_since_ns == 0) path.blocked_since_ns = monotonic_ns();
  }
  for (size_t j = n; j < k; ++j) records_.release(batch_records_[j]);
  // A provider that is full takes a WR or two per call (shm under load, tcp while it connects):
  // the next batch is small, and batches double again while they are taken whole.
  if (k >= 2) ds.batch_wrs = n < k ? kMinBatchWrs : std::min(kMaxBatchWrs, ds.batch_wrs * 2);
  return n;
}

bool GroupWorker::post_pending(size_t d) {
  DomainState& ds = domains_[d];
  size_t posted = 0;
  // clock_ns_ is this posting thread's fresh read: the worker's pass (or its latest poll), or
  // post_on_caller's.
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
    // A run of WRs in one call where they allow it, else a batch of WRs (one record each) in
    // one call, else one WR (a stream of one WR — most single writes — goes there at once).
    size_t n = 0;
    result = transport::PostResult::kPosted;
    if (s.end - s.next > 1) {
      n = post_run(d, s, ds.wrs_per_pass - posted, &result, &error);
      if (n == 0 && result == transport::PostResult::kPosted) n = post_batch(d, s, ds.wrs_per_pass - posted, &result, &error);
    }
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
      if (r->unposted == 0 && r->submit_ns != 0) note_all_posted(*r);
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

}  // namespace fabric_lib::detail

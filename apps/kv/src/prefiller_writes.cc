// Posting a request's writes as progress allows, tracking them through their completions, ending
// dispatches (success, confirmation, reject), and the prefiller's timer.
#include "log.h"
#include "prefiller_impl.h"

namespace fabric_lib::kv {

namespace {
bool all_posted(const Prefiller::Impl::Dest& dest, uint32_t total_pages) {
  for (uint32_t s : dest.sent)
    if (s < total_pages) return false;
  return !dest.d.has_tail || dest.tail_posted;
}
}  // namespace

void Prefiller::Impl::pump_locked(Request& r, uint32_t first, uint32_t last) {
  if (!r.known) return;
  const uint32_t total = pages_for_tokens(r.info.num_tokens, options.layout.page_tokens);
  for (auto& [rank, dest] : r.dests) {
    if (dest->state != Dest::State::kActive) continue;
    for (uint32_t l = first; l < last && dest->state == Dest::State::kActive; ++l) {
      // Complete pages only, except after the last token: the partial last page goes then.
      const uint32_t ready = r.ready_tokens[l] >= r.info.num_tokens ? total : r.ready_tokens[l] / options.layout.page_tokens;
      if (ready > dest->sent[l]) {
        post_layer_locked(r, *dest, l, dest->sent[l], ready);
        dest->sent[l] = ready;
      }
    }
    // The tail goes last: after every page write of this dispatch was posted.
    if (dest->state == Dest::State::kActive && dest->d.has_tail && !dest->tail_posted && r.tail_ready) {
      bool pages_out = true;
      for (uint32_t s : dest->sent) pages_out = pages_out && s >= total;
      if (pages_out) post_tail_locked(r, *dest);
    }
  }
}

void Prefiller::Impl::post_layer_locked(Request& r, Dest& dest, uint32_t layer, uint32_t from, uint32_t to) {
  const DispatchMessage& d = dest.d;
  std::weak_ptr<Impl> weak = weak_from_this();
  std::shared_ptr<Request> rp = r.shared_from_this();
  std::shared_ptr<Dest> dp = dest.shared_from_this();
  for (const CopySegment& seg : dest.plan.segments) {
    const KvBufferRef& src = seg.src_buffer == 0 ? options.memory.k[layer] : options.memory.v[layer];
    const KvBufferRef& dst = seg.dst_buffer == 0 ? d.memory.k[layer] : d.memory.v[layer];
    PagedWriteRequest w;
    w.src = options.regions[src.region].handle;
    w.src_offset = src.offset + seg.src_offset;
    w.src_stride = options.memory.page_stride;
    w.dst = d.regions[dst.region];
    w.dst_offset = dst.offset + seg.dst_offset;
    w.dst_stride = d.memory.page_stride;
    w.page_length = seg.length;
    w.imm = d.imm;
    w.src_pages.assign(r.info.pages.begin() + from, r.info.pages.begin() + to);
    w.dst_pages.assign(d.dst_pages.begin() + (from - d.first_page), d.dst_pages.begin() + (to - d.first_page));
    const uint64_t token = ++dest.next_token;
    auto id = engine.submit_paged_writes(std::move(w), Completion::callback([weak, rp, dp, token](const Status& st) {
                                           if (auto i = weak.lock()) i->on_write_done(rp, dp, token, st);
                                         }));
    if (!id.ok()) {
      counters.writes_failed++;
      stop_dest_locked(r, dest, Dest::State::kFailing, id.status());
      return;
    }
    dest.inflight.emplace(token, *id);
    dest.outstanding++;
    r.any_posted = true;
    counters.paged_writes_posted++;
    counters.pages_posted += to - from;
  }
}

void Prefiller::Impl::post_tail_locked(Request& r, Dest& dest) {
  const DispatchMessage& d = dest.d;
  dest.tail_posted = true;
  const uint64_t len = options.regions[r.info.tail_region].desc.length();
  if (r.info.tail_offset > len || d.tail_length > len - r.info.tail_offset) {
    stop_dest_locked(r, dest, Dest::State::kFailing,
                     out_of_range("prefiller: the decoder's tail (" + std::to_string(d.tail_length) +
                                  " bytes) does not fit the request's tail source"));
    return;
  }
  WriteRequest w;
  w.src = options.regions[r.info.tail_region].handle;
  w.src_offset = r.info.tail_offset;
  w.dst = d.regions[d.tail_region];
  w.dst_offset = d.tail_offset;
  w.length = d.tail_length;
  w.imm = d.imm;
  std::weak_ptr<Impl> weak = weak_from_this();
  std::shared_ptr<Request> rp = r.shared_from_this();
  std::shared_ptr<Dest> dp = dest.shared_from_this();
  const uint64_t token = ++dest.next_token;
  auto id = engine.submit_write(std::move(w), Completion::callback([weak, rp, dp, token](const Status& st) {
                                  if (auto i = weak.lock()) i->on_write_done(rp, dp, token, st);
                                }));
  if (!id.ok()) {
    counters.writes_failed++;
    stop_dest_locked(r, dest, Dest::State::kFailing, id.status());
    return;
  }
  dest.inflight.emplace(token, *id);
  dest.outstanding++;
  r.any_posted = true;
  counters.tail_writes_posted++;
}

void Prefiller::Impl::on_write_done(const std::shared_ptr<Request>& r, const std::shared_ptr<Dest>& dest, uint64_t token,
                                    const Status& st) {
  Deferred d;
  {
    std::lock_guard lock(mu);
    if (dest->inflight.erase(token) == 0) return;
    dest->outstanding--;
    if (st.ok()) {
      dest->completed++;
      counters.writes_completed++;
      peers.touch(dest->decoder, Clock::now());  // its data lands: it is alive
    } else if (st.code() == ErrorCode::kCancelled && dest->state != Dest::State::kActive) {
      counters.writes_cancelled++;  // our own cancel of a stopping destination
    } else {
      counters.writes_failed++;
      if (dest->state == Dest::State::kActive) stop_dest_locked(*r, *dest, Dest::State::kFailing, st);
    }
    settle_locked(*r, d);
  }
  run(d);
}

void Prefiller::Impl::stop_dest_locked(Request& r, Dest& dest, Dest::State state, Status why) {
  if (dest.state == Dest::State::kEnded) return;
  // Writes of this destination still queued in the engine are dropped now (TransferEngine::
  // cancel); the posted ones complete as they do, and the confirmation waits for every one
  // (settle_locked). cancel() only waits for the group's worker, never for our callbacks, so it
  // is safe under `mu`; a write that just finished answers NotFound.
  for (const auto& [token, id] : dest.inflight) (void)engine.cancel(id);
  if (dest.state == Dest::State::kActive || state == Dest::State::kStopping || state == Dest::State::kSilent) dest.state = state;
  if (dest.error.ok()) dest.error = why;
  if (!r.failed && state != Dest::State::kStopping) fail_request_locked(r, why);
}

void Prefiller::Impl::fail_request_locked(Request& r, Status why) {
  if (!r.failed) {
    r.failed = true;
    r.error = why;
    KV_LOG(kInfo, "prefiller: request '%s' failed: %s", r.id.c_str(), why.to_string().c_str());
  }
  for (auto& [rank, dest] : r.dests)
    if (dest->state == Dest::State::kActive) {
      dest->state = Dest::State::kFailing;
      if (dest->error.ok()) dest->error = why;
    }
}

void Prefiller::Impl::settle_locked(Request& r, Deferred& d) {
  const uint32_t total = r.known ? pages_for_tokens(r.info.num_tokens, options.layout.page_tokens) : UINT32_MAX;
  for (auto& [rank, dp] : r.dests) {
    Dest& dest = *dp;
    if (dest.state == Dest::State::kEnded || dest.outstanding > 0) continue;
    const DispatchMessage& m = dest.d;
    switch (dest.state) {
      case Dest::State::kActive:
        if (!all_posted(dest, total)) continue;
        dest.succeeded = true;
        break;
      case Dest::State::kStopping:
        d.messages.emplace_back(dest.decoder, CancelConfirmMessage{m.request_id, m.imm, CancelOutcome::kStopped, dest.completed});
        counters.confirms_sent++;
        break;
      case Dest::State::kFailing:
        d.messages.emplace_back(dest.decoder, RejectMessage{m.request_id, m.imm, dest.error.code(), dest.completed > 0 || dest.next_token > 0,
                                                            dest.error.message().substr(0, kMaxReasonBytes)});
        break;
      case Dest::State::kSilent:
      case Dest::State::kEnded:
        break;
    }
    dest.state = Dest::State::kEnded;
    dest.d.regions.clear();  // drop the descriptors early
    settled.notify_all();
  }
  if (r.reported) return;
  const RequestStatus s = status_locked(r);
  bool ended = true;
  for (auto& [rank, dest] : r.dests) ended = ended && dest->state == Dest::State::kEnded;
  if ((s.poll == KvPoll::kSuccess || s.poll == KvPoll::kFailed) && ended) {
    r.reported = true;
    (s.poll == KvPoll::kSuccess ? metrics.succeeded : metrics.failed).add();
    finished.push_back({r.id, s.poll == KvPoll::kSuccess ? ok_status() : r.error});
    settled.notify_all();
  }
}

void Prefiller::Impl::tick() {
  Deferred d;
  {
    std::lock_guard lock(mu);
    const Clock::time_point now = Clock::now();
    for (auto it = tombstones.begin(); it != tombstones.end();) it = now >= it->second ? tombstones.erase(it) : std::next(it);
    for (auto& [id, r] : requests) {
      if (r->reported) continue;
      for (auto& [rank, dest] : r->dests)
        if (dest->state == Dest::State::kActive && now >= dest->deadline)
          stop_dest_locked(*r, *dest, Dest::State::kFailing,
                           Status(ErrorCode::kDeadlineExceeded, "prefiller: the dispatch's deadline passed"));
      if (!r->failed && now >= r->deadline && status_locked(*r).poll != KvPoll::kSuccess)
        fail_request_locked(*r, Status(ErrorCode::kDeadlineExceeded, "prefiller: the request's deadline passed"));
      settle_locked(*r, d);
    }
    auto active = [&](const DomainAddress& a) {
      for (auto& [id, r] : requests)
        for (auto& [rank, dest] : r->dests)
          if (dest->decoder == a && dest->state != Dest::State::kEnded && dest->state != Dest::State::kSilent) return true;
      return false;
    };
    for (const DomainAddress& dead : peers.overdue(now, options.liveness.peer_timeout, active)) {
      counters.peers_declared_dead++;
      KV_LOG(kWarn, "prefiller: decoder %s declared dead (silent)", dead.to_hex().substr(0, 16).c_str());
      for (auto& [id, r] : requests) {
        for (auto& [rank, dest] : r->dests)
          if (dest->decoder == dead && dest->state != Dest::State::kEnded)
            stop_dest_locked(*r, *dest, Dest::State::kSilent, Status(ErrorCode::kPeerUnreachable, "prefiller: decoder silent"));
        settle_locked(*r, d);
      }
    }
    if (now >= next_heartbeat) {
      next_heartbeat = now + options.liveness.heartbeat_interval;
      std::vector<DomainAddress> targets;
      for (auto& [id, r] : requests)
        for (auto& [rank, dest] : r->dests)
          if (dest->state != Dest::State::kEnded && dest->state != Dest::State::kSilent &&
              std::find(targets.begin(), targets.end(), dest->decoder) == targets.end())
            targets.push_back(dest->decoder);
      for (const DomainAddress& t : targets) {
        d.messages.emplace_back(t, HeartbeatMessage{static_cast<uint32_t>(requests.size())});
        counters.heartbeats_sent++;
      }
    }
  }
  run(d);
}

}  // namespace fabric_lib::kv

#include "accept_message.h"
#include "log.h"
#include "prefiller_impl.h"

namespace fabric_lib::kv {

Prefiller::Impl::Impl(TransferEngine& e, PrefillerOptions o)
    : engine(e), options(std::move(o)), self(e.main_address()), incarnation(new_incarnation()),
      metrics(KvStateMetrics::create(e, "prefiller")) {}

Result<std::unique_ptr<Prefiller>> Prefiller::create(TransferEngine& engine, PrefillerOptions options) {
  FABRIC_LIB_RETURN_IF_ERROR(options.layout.validate());
  FABRIC_LIB_RETURN_IF_ERROR(validate_tp(options.layout, options.rank.tp_size));
  if (options.rank.tp_rank >= options.rank.tp_size) return invalid_argument("prefiller: tp_rank outside tp_size");
  if (options.rank.packing != options.memory.packing) return invalid_argument("prefiller: rank.packing != memory.packing");
  if (options.regions.empty() || options.regions.size() > 0xFFFF) return invalid_argument("prefiller: no regions");
  std::vector<uint64_t> lengths;
  for (const MrRegistration& r : options.regions) lengths.push_back(r.desc.length());
  FABRIC_LIB_RETURN_IF_ERROR(options.memory.validate(options.layout, options.rank.tp_size, lengths));
  if (options.liveness.heartbeat_interval.count() <= 0 || options.liveness.peer_timeout <= options.liveness.heartbeat_interval)
    return invalid_argument("prefiller: need 0 < heartbeat_interval < peer_timeout");
  auto impl = std::make_shared<Impl>(engine, std::move(options));
  std::weak_ptr<Impl> weak = impl;
  FABRIC_LIB_RETURN_IF_ERROR(engine.post_recvs(impl->options.recv_buffers, impl->options.max_message_bytes,
                                               [weak](std::span<const uint8_t> m) {
                                                 if (auto i = weak.lock()) i->on_bytes(m);
                                               }));
  const auto period = std::max(std::chrono::milliseconds(5), impl->options.liveness.heartbeat_interval / 4);
  impl->ticker = std::make_unique<Ticker>(period, [weak] {
    if (auto i = weak.lock()) i->tick();
  });
  return std::unique_ptr<Prefiller>(new Prefiller(std::move(impl)));
}

Prefiller::Prefiller(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
Prefiller::~Prefiller() {
  shutdown();
  impl_->ticker->stop();
}

uint32_t Prefiller::num_layers() const { return impl_->options.layout.num_layers; }
const DomainAddress& Prefiller::address() const { return impl_->self; }

std::shared_ptr<Prefiller::Impl::Request>& Prefiller::Impl::request_locked(const std::string& id) {
  auto& r = requests[id];
  if (!r) {
    r = std::make_shared<Request>();
    r->id = id;
    metrics.started.add();
    r->ready_tokens.assign(options.layout.num_layers, 0);
  }
  return r;
}

Status Prefiller::add_request(PrefillRequest q) {
  Impl& I = *impl_;
  if (q.id.empty() || q.id.size() > kMaxRequestIdBytes) return invalid_argument("prefiller: request id must be 1..256 bytes");
  if (q.num_tokens == 0) return invalid_argument("prefiller: num_tokens is 0");
  if (q.pages.size() != pages_for_tokens(q.num_tokens, I.options.layout.page_tokens))
    return invalid_argument("prefiller: need pages_for_tokens(num_tokens) pages");
  if (!pages_valid(q.pages, I.options.memory.num_pages)) return invalid_argument("prefiller: pages repeat or lie outside the cache");
  if (q.tail_region >= I.options.regions.size()) return invalid_argument("prefiller: tail region out of range");
  if (q.timeout.count() <= 0) return invalid_argument("prefiller: timeout must be > 0");
  Impl::Deferred d;
  {
    std::lock_guard lock(I.mu);
    if (I.stopping) return stopped("prefiller: shut down");
    auto& r = I.request_locked(q.id);
    if (r->known) return Status(ErrorCode::kAlreadyExists, "prefiller: request '" + q.id + "' was added already");
    if (q.decode_tp > 0) {
      auto ranks = destinations_of(I.options.layout, I.options.rank, q.decode_tp, q.decode_packing);
      if (!ranks.ok()) return ranks.status();
      if (r->expected_known && r->decode_tp != q.decode_tp)
        return invalid_argument("prefiller: decode_tp differs from the dispatches'");
      r->expected_known = true;
      r->decode_tp = q.decode_tp;
      r->expected_ranks = *ranks;
    }
    r->known = true;
    r->info = std::move(q);
    r->deadline = Clock::now() + r->info.timeout;
    for (auto& [rank, dest] : r->dests) {
      if (dest->d.num_tokens != r->info.num_tokens)
        I.stop_dest_locked(*r, *dest, Impl::Dest::State::kFailing,
                           invalid_argument("prefiller: the dispatch says " + std::to_string(dest->d.num_tokens) +
                                            " tokens, the prefill " + std::to_string(r->info.num_tokens)));
    }
    I.pump_locked(*r, 0, I.options.layout.num_layers);
    I.settle_locked(*r, d);
  }
  I.run(d);
  return ok_status();
}

Result<uint64_t> Prefiller::begin_pass(const std::vector<PassEntry>& entries) {
  Impl& I = *impl_;
  std::lock_guard lock(I.mu);
  if (I.stopping) return stopped("prefiller: shut down");
  Impl::Pass pass;
  for (const PassEntry& e : entries) {
    auto it = I.requests.find(e.id);
    if (it == I.requests.end() || !it->second->known) return not_found("prefiller: pass names unknown request '" + e.id + "'");
    const Impl::Request& r = *it->second;
    if (e.tokens_end > r.info.num_tokens) return invalid_argument("prefiller: tokens_end past the request's tokens");
    if (e.tokens_end < r.ready_tokens.back()) return invalid_argument("prefiller: tokens_end goes back");
    pass.entries.emplace_back(it->second, e.tokens_end);
  }
  const uint64_t id = I.next_pass++;
  if (id >= (1ull << 47)) return resource_exhausted("prefiller: pass ids exhausted");
  I.passes.emplace(id, std::move(pass));
  return id;
}

Status Prefiller::progress(uint64_t pass_id, uint64_t value) { return impl_->progress(pass_id, value); }

Status Prefiller::Impl::progress(uint64_t pass_id, uint64_t value) {
  Impl& I = *this;
  const uint32_t layers = I.options.layout.num_layers;
  if (value > layers + 1ull) return invalid_argument("prefiller: progress past num_layers + 1");
  Impl::Deferred d;
  {
    std::lock_guard lock(I.mu);
    auto it = I.passes.find(pass_id);
    if (it == I.passes.end()) return not_found("prefiller: no pass " + std::to_string(pass_id));
    Impl::Pass& pass = it->second;
    if (value <= pass.progress) return ok_status();  // coalesced or repeated
    const uint32_t first = static_cast<uint32_t>(std::min<uint64_t>(pass.progress, layers));
    const uint32_t last = static_cast<uint32_t>(std::min<uint64_t>(value, layers));
    pass.progress = value;
    for (auto& [r, tokens_end] : pass.entries) {
      for (uint32_t l = first; l < last; ++l) r->ready_tokens[l] = std::max(r->ready_tokens[l], tokens_end);
      if (value == layers + 1ull && tokens_end == r->info.num_tokens) r->tail_ready = true;
      I.pump_locked(*r, first, last);
      I.settle_locked(*r, d);
    }
    if (value == layers + 1ull) I.passes.erase(it);
  }
  I.run(d);
  return ok_status();
}

Result<UvmWatcher> Prefiller::attach_progress_watcher() {
  std::weak_ptr<Impl> weak = impl_;
  return impl_->engine.alloc_uvm_watcher([weak](uint64_t, uint64_t value) {
    auto i = weak.lock();
    if (!i) return false;
    // Values of another pass than the ones begun (a reset to 0 between graph replays) are ignored.
    Prefiller::Impl& I = *i;
    const uint64_t pass = value >> 16, progress = value & 0xFFFF;
    if (pass == 0) return true;
    bool known;
    {
      std::lock_guard lock(I.mu);
      known = I.passes.count(pass) > 0;
    }
    if (known) (void)I.progress(pass, progress);
    return true;
  });
}

Status Prefiller::abort(const std::string& id, Status why) {
  Impl& I = *impl_;
  Impl::Deferred d;
  {
    std::lock_guard lock(I.mu);
    auto it = I.requests.find(id);
    if (it == I.requests.end()) return not_found("prefiller: no request '" + id + "'");
    I.fail_request_locked(*it->second, why.ok() ? cancelled("prefiller: aborted") : why);
    I.settle_locked(*it->second, d);
  }
  I.run(d);
  return ok_status();
}

RequestStatus Prefiller::Impl::status_locked(const Request& r) const {
  RequestStatus s;
  bool all_here = r.known && r.expected_known;
  bool all_done = all_here;
  bool all_ended = true;
  for (uint32_t rank : r.expected_ranks) {
    auto it = r.dests.find(rank);
    if (it == r.dests.end()) {
      all_here = all_done = false;
      continue;
    }
    all_done = all_done && it->second->succeeded;
  }
  for (const auto& [rank, dest] : r.dests) all_ended = all_ended && dest->state == Dest::State::kEnded;
  if (r.failed) s.poll = KvPoll::kFailed;
  else if (all_done) s.poll = KvPoll::kSuccess;
  else if (!all_here) s.poll = KvPoll::kBootstrapping;
  else s.poll = r.any_posted ? KvPoll::kTransferring : KvPoll::kWaitingForInput;
  s.error = r.error;
  s.pages_reusable = (s.poll == KvPoll::kSuccess || s.poll == KvPoll::kFailed) && all_ended;
  return s;
}

Result<RequestStatus> Prefiller::status(const std::string& id) const {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->requests.find(id);
  if (it == impl_->requests.end()) return not_found("prefiller: no request '" + id + "'");
  return impl_->status_locked(*it->second);
}

KvPoll Prefiller::poll(const std::string& id) const {
  auto s = status(id);
  return s.ok() ? s->poll : KvPoll::kFailed;
}

std::vector<FinishedRequest> Prefiller::get_finished() {
  std::lock_guard lock(impl_->mu);
  std::vector<FinishedRequest> out(impl_->finished.begin(), impl_->finished.end());
  impl_->finished.clear();
  for (const FinishedRequest& f : out) impl_->requests.erase(f.id);
  return out;
}

std::vector<FinishedRequest> Prefiller::wait_finished(std::chrono::milliseconds timeout) {
  {
    std::unique_lock lock(impl_->mu);
    impl_->settled.wait_for(lock, timeout, [&] { return !impl_->finished.empty(); });
  }
  return get_finished();
}

Status Prefiller::shutdown(std::chrono::milliseconds wait) {
  Impl& I = *impl_;
  Impl::Deferred d;
  std::unique_lock lock(I.mu);
  if (!I.stopping) {
    I.stopping = true;
    for (auto& [id, r] : I.requests) {
      I.fail_request_locked(*r, stopped("prefiller: shut down"));
      I.settle_locked(*r, d);
    }
    lock.unlock();
    I.run(d);
    lock.lock();
  }
  const bool drained = I.settled.wait_for(lock, wait, [&] {
    for (auto& [id, r] : I.requests)
      for (auto& [rank, dest] : r->dests)
        if (dest->state != Impl::Dest::State::kEnded) return false;
    return true;
  });
  return drained ? ok_status() : Status(ErrorCode::kDeadlineExceeded, "prefiller: posted writes did not complete in time");
}

PrefillerStats Prefiller::stats() const {
  std::lock_guard lock(impl_->mu);
  PrefillerStats s = impl_->counters;
  s.active_requests = impl_->requests.size();
  return s;
}

// --- messages -----------------------------------------------------------------------------------

void Prefiller::Impl::on_bytes(std::span<const uint8_t> bytes) {
  Deferred d;
  {
    std::lock_guard lock(mu);
    std::optional<Message> m = accept_message(bytes, Role::kDecoder, counters, "prefiller");
    if (!m) return;
    const Clock::time_point now = Clock::now();
    const DomainAddress& from = m->header.sender;
    if (peers.heard(from, m->header.incarnation, now)) {
      // The decoder restarted: dispatches of its former incarnation have no reader any more.
      for (auto& [id, r] : requests)
        for (auto& [rank, dest] : r->dests)
          if (dest->decoder == from && dest->state == Dest::State::kActive)
            stop_dest_locked(*r, *dest, Dest::State::kSilent, Status(ErrorCode::kPeerUnreachable, "prefiller: decoder restarted"));
    }
    if (auto* dispatch = std::get_if<DispatchMessage>(&m->body)) {
      on_dispatch(std::move(*dispatch), from, now, d);
    } else if (const auto* c = std::get_if<CancelMessage>(&m->body)) {
      on_cancel(*c, from, now, d);
    } else if (!std::holds_alternative<HeartbeatMessage>(m->body)) {
      counters.unexpected_messages++;
    }
  }
  run(d);
}

void Prefiller::Impl::reject(const DispatchMessage& m, const DomainAddress& to, Status why, Deferred& d) {
  counters.dispatches_rejected++;
  KV_LOG(kWarn, "prefiller: refused dispatch of '%s': %s", m.request_id.c_str(), why.to_string().c_str());
  d.messages.emplace_back(to, RejectMessage{m.request_id, m.imm, why.code(), false, why.message().substr(0, kMaxReasonBytes)});
}

void Prefiller::Impl::on_dispatch(DispatchMessage m, const DomainAddress& from, Clock::time_point now, Deferred& d) {
  counters.dispatches_received++;
  if (stopping) return reject(m, from, stopped("prefiller: shutting down"), d);
  if (m.layout != options.layout)
    return reject(m, from, invalid_argument("layout mismatch: " + m.layout.describe_mismatch(options.layout)), d);
  if (m.prefill_tp != options.rank.tp_size || m.prefill_rank != options.rank.tp_rank)
    return reject(m, from, invalid_argument("addressed to prefill rank " + std::to_string(m.prefill_rank) + "/" +
                                            std::to_string(m.prefill_tp) + ", this is " + std::to_string(options.rank.tp_rank) +
                                            "/" + std::to_string(options.rank.tp_size)), d);
  if (m.domains != engine.num_domains())
    return reject(m, from, invalid_argument("domains per group differ: " + std::to_string(m.domains) + " != " +
                                            std::to_string(engine.num_domains())), d);
  if (tombstones.count({m.request_id, m.imm})) return reject(m, from, cancelled("cancelled before it arrived"), d);
  for (const MrDesc& region : m.regions)
    if (region.num_domains() != engine.num_domains()) return reject(m, from, invalid_argument("region from another group size"), d);
  auto plan = plan_pair(options.layout, options.rank, m.decoder);
  if (!plan.ok()) return reject(m, from, plan.status(), d);
  auto& r = request_locked(m.request_id);
  if (r->known && m.num_tokens != r->info.num_tokens)
    return reject(m, from, invalid_argument("the dispatch says " + std::to_string(m.num_tokens) + " tokens, the prefill " +
                                            std::to_string(r->info.num_tokens)), d);
  if (r->expected_known && m.decoder.tp_size != r->decode_tp)
    return reject(m, from, invalid_argument("decode tp differs from an earlier dispatch of the request"), d);
  if (auto it = r->dests.find(m.decoder.tp_rank); it != r->dests.end()) {
    if (it->second->d.imm == m.imm) return;  // a duplicate: nothing new
    return reject(m, from, Status(ErrorCode::kAlreadyExists, "decode rank dispatched this request already"), d);
  }
  if (r->failed) return reject(m, from, r->error, d);
  if (!r->expected_known) {
    auto ranks = destinations_of(options.layout, options.rank, m.decoder.tp_size, m.decoder.packing);
    if (!ranks.ok()) return reject(m, from, ranks.status(), d);
    r->expected_known = true;
    r->decode_tp = m.decoder.tp_size;
    r->expected_ranks = *ranks;
  }
  auto dest = std::make_shared<Dest>();
  dest->decoder = from;
  dest->plan = *plan;
  dest->deadline = now + std::chrono::milliseconds(m.timeout_ms);
  dest->sent.assign(options.layout.num_layers, m.first_page);
  dest->d = std::move(m);
  // A request the framework has not added yet ends with its dispatches' deadlines.
  if (!r->known) r->deadline = r->deadline == Clock::time_point::max() ? dest->deadline : std::max(r->deadline, dest->deadline);
  peers.watch(from, now);
  const uint32_t rank = dest->d.decoder.tp_rank;
  r->dests.emplace(rank, dest);
  pump_locked(*r, 0, options.layout.num_layers);  // a late dispatch catches up at once
  settle_locked(*r, d);
}

void Prefiller::Impl::on_cancel(const CancelMessage& m, const DomainAddress& from, Clock::time_point now, Deferred& d) {
  counters.cancels_received++;
  auto it = requests.find(m.request_id);
  std::shared_ptr<Dest> dest;
  if (it != requests.end())
    for (auto& [rank, x] : it->second->dests)
      if (x->d.imm == m.imm && x->decoder == from) dest = x;
  if (!dest) {
    const auto ttl = std::min(options.max_tombstone, std::chrono::milliseconds(m.timeout_ms));
    tombstones[{m.request_id, m.imm}] = now + ttl;
    d.messages.emplace_back(from, CancelConfirmMessage{m.request_id, m.imm, CancelOutcome::kUnknown, 0});
    counters.confirms_sent++;
    return;
  }
  Request& r = *it->second;
  if (dest->state == Dest::State::kEnded) {
    d.messages.emplace_back(from, CancelConfirmMessage{m.request_id, m.imm, CancelOutcome::kFinished, dest->completed});
    counters.confirms_sent++;
    return;
  }
  if (dest->state == Dest::State::kActive || dest->state == Dest::State::kFailing || dest->state == Dest::State::kSilent) {
    stop_dest_locked(r, *dest, Dest::State::kStopping, cancelled("prefiller: cancelled by the decoder"));
    if (!r.failed) fail_request_locked(r, cancelled("prefiller: cancelled by decode rank " + std::to_string(dest->d.decoder.tp_rank)));
  }
  settle_locked(r, d);  // confirms at once when nothing is in flight
}

void Prefiller::Impl::run(Deferred& d) {
  for (auto& [to, body] : d.messages) send(to, std::move(body));
  d = Deferred{};
}

void Prefiller::Impl::send(const DomainAddress& to, MessageBody body) {
  std::vector<uint8_t> bytes = encode_message({{type_of(body), Role::kPrefiller, incarnation, self}, std::move(body)});
  auto id = engine.submit_send(to, bytes, Completion());
  if (!id.ok()) KV_LOG(kDebug, "prefiller: send failed: %s", id.status().to_string().c_str());
}

}  // namespace fabric_lib::kv

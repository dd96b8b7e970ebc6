#include "decoder_impl.h"

#include "log.h"

namespace fabric_lib::kv {

std::string_view kv_poll_name(KvPoll poll) {
  switch (poll) {
    case KvPoll::kBootstrapping: return "bootstrapping";
    case KvPoll::kWaitingForInput: return "waiting_for_input";
    case KvPoll::kTransferring: return "transferring";
    case KvPoll::kSuccess: return "success";
    case KvPoll::kFailed: return "failed";
  }
  return "unknown";
}

Decoder::Impl::Impl(TransferEngine& e, DecoderOptions o)
    : engine(e), options(std::move(o)), self(e.main_address()), incarnation(new_incarnation()),
      imms(options.max_requests, options.imm_tag), metrics(KvStateMetrics::create(e, "decoder")) {}

Result<std::unique_ptr<Decoder>> Decoder::create(TransferEngine& engine, DecoderOptions options) {
  FABRIC_LIB_RETURN_IF_ERROR(options.layout.validate());
  FABRIC_LIB_RETURN_IF_ERROR(validate_tp(options.layout, options.rank.tp_size));
  if (options.rank.tp_rank >= options.rank.tp_size) return invalid_argument("decoder: tp_rank outside tp_size");
  if (options.rank.packing != options.memory.packing) return invalid_argument("decoder: rank.packing != memory.packing");
  if (options.regions.empty() || options.regions.size() > kMaxRegions) return invalid_argument("decoder: 1..16 regions");
  std::vector<uint64_t> lengths;
  for (const MrRegistration& r : options.regions) {
    if (!has_access(r.desc.access(), Access::kRemoteWrite)) return invalid_argument("decoder: regions must be kRemoteWrite");
    lengths.push_back(r.desc.length());
  }
  FABRIC_LIB_RETURN_IF_ERROR(options.memory.validate(options.layout, options.rank.tp_size, lengths));
  if (options.max_requests < 1 || options.max_requests > kImmMaxSlots) return invalid_argument("decoder: max_requests 1..65536");
  if (options.liveness.heartbeat_interval.count() <= 0 || options.liveness.peer_timeout <= options.liveness.heartbeat_interval)
    return invalid_argument("decoder: need 0 < heartbeat_interval < peer_timeout");
  auto impl = std::make_shared<Impl>(engine, std::move(options));
  std::weak_ptr<Impl> weak = impl;
  Status s = engine.post_recvs(impl->options.recv_buffers, impl->options.max_message_bytes,
                               [weak](std::span<const uint8_t> m) {
                                 if (auto i = weak.lock()) i->on_bytes(m);
                               });
  if (!s.ok()) return s;
  const auto period = std::max(std::chrono::milliseconds(5), impl->options.liveness.heartbeat_interval / 4);
  impl->ticker = std::make_unique<Ticker>(period, [weak] {
    if (auto i = weak.lock()) i->tick();
  });
  return std::unique_ptr<Decoder>(new Decoder(std::move(impl)));
}

Decoder::Decoder(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
Decoder::~Decoder() {
  shutdown();
  impl_->ticker->stop();
}

Status Decoder::start(DecodeRequest request) { return impl_->start(std::move(request)); }

Status Decoder::Impl::start(DecodeRequest q) {
  const KvLayout& layout = options.layout;
  if (q.id.empty() || q.id.size() > kMaxRequestIdBytes) return invalid_argument("decoder: request id must be 1..256 bytes");
  if (q.prefill.ranks.size() != q.prefill.tp_size) return invalid_argument("decoder: need one address per prefill rank");
  FABRIC_LIB_RETURN_IF_ERROR(validate_tp(layout, q.prefill.tp_size));
  if (q.num_tokens == 0) return invalid_argument("decoder: num_tokens is 0");
  const uint32_t total = pages_for_tokens(q.num_tokens, layout.page_tokens);
  if (q.first_page > total || q.pages.size() != total - q.first_page)
    return invalid_argument("decoder: need pages_for_tokens(num_tokens) - first_page pages");
  if (!pages_valid(q.pages, options.memory.num_pages)) return invalid_argument("decoder: pages repeat or lie outside the cache");
  if (q.tail_length > 0) {
    if (q.tail_region >= options.regions.size()) return invalid_argument("decoder: tail region out of range");
    const uint64_t len = options.regions[q.tail_region].desc.length();
    if (q.tail_length > kMaxTailBytes || q.tail_offset > len || q.tail_length > len - q.tail_offset)
      return out_of_range("decoder: tail slot outside its region");
  }
  if (q.timeout.count() <= 0) return invalid_argument("decoder: timeout must be > 0");
  auto sources = sources_of(layout, q.prefill.tp_size, q.prefill.packing, options.rank);
  if (!sources.ok()) return sources.status();
  const TransferShape shape{static_cast<uint32_t>(q.pages.size()), q.tail_length, engine.num_domains()};
  auto expected = expected_imm_count(layout, q.prefill.tp_size, q.prefill.packing, options.rank, shape);
  if (!expected.ok()) return expected.status();
  const Clock::time_point now = Clock::now();

  auto r = std::make_shared<Request>();
  r->id = q.id;
  r->expected = *expected;
  r->deadline = now + q.timeout;
  {
    std::lock_guard lock(mu);
    if (stopped) return fabric_lib::stopped("decoder: shut down");
    if (by_id.count(q.id)) return Status(ErrorCode::kAlreadyExists, "decoder: request '" + q.id + "' is active");
    auto imm = imms.allocate();
    if (!imm.ok()) return imm.status();
    r->imm = *imm;
    by_id[q.id] = r;
    by_imm[r->imm] = r;
    counters.requests_started++;
  }
  // Dispatches, encoded before anything is registered so that a too-long one fails cleanly.
  std::vector<Source> planned;
  for (uint32_t i : *sources) {
    auto plan = plan_pair(layout, {i, q.prefill.tp_size, q.prefill.packing}, options.rank);
    if (imm_count_of_pair(layout, *plan, shape) == 0) continue;  // nothing to send (prefix reuse, no tail)
    DispatchMessage m;
    m.request_id = q.id;
    m.layout = layout;
    m.fingerprint = layout.fingerprint();
    m.decoder = options.rank;
    m.prefill_rank = i;
    m.prefill_tp = q.prefill.tp_size;
    m.domains = static_cast<uint16_t>(engine.num_domains());
    m.num_tokens = q.num_tokens;
    m.first_page = q.first_page;
    m.dst_pages = q.pages;
    m.imm = r->imm;
    m.timeout_ms = remaining_ms(r->deadline, now);
    for (const MrRegistration& reg : options.regions) m.regions.push_back(reg.desc);
    m.memory = options.memory;
    m.has_tail = plan->sends_tail && q.tail_length > 0;
    if (m.has_tail) {
      m.tail_region = q.tail_region;
      m.tail_offset = q.tail_offset;
      m.tail_length = q.tail_length;
    }
    Source s;
    s.rank = i;
    s.address = q.prefill.ranks[i];
    s.dispatch = encode_message({{MessageType::kDispatch, Role::kDecoder, incarnation, self}, std::move(m)});
    if (s.dispatch.size() > options.max_message_bytes) {
      std::lock_guard lock(mu);
      by_id.erase(q.id);
      by_imm.erase(r->imm);
      imms.release(r->imm);
      counters.requests_started--;
      return invalid_argument("decoder: the dispatch (" + std::to_string(s.dispatch.size()) +
                              " bytes) exceeds max_message_bytes");
    }
    planned.push_back(std::move(s));
  }
  // Stale counts of this imm value (a request 4096 generations ago) must not count here.
  engine.imms().release(r->imm);
  if (r->expected == 0) {  // the decoder already holds everything (prefix reuse, no tail)
    Deferred d;
    std::lock_guard lock(mu);
    metrics.started.add();
    r->poll = KvPoll::kSuccess;
    counters.requests_succeeded++;
    metrics.succeeded.add();
    settle_locked(*r, now, d);
    return ok_status();
  }
  // The sources are known before the expectation: should it end at once (a tiny deadline), the
  // request waits for its dispatches' fates before its pages count as reusable.
  std::vector<std::pair<size_t, std::vector<uint8_t>>> to_send;
  {
    std::lock_guard lock(mu);
    r->sources = std::move(planned);
    for (size_t k = 0; k < r->sources.size(); ++k) {
      to_send.emplace_back(k, std::move(r->sources[k].dispatch));
      peers.watch(r->sources[k].address, now);
    }
  }
  // The expectation comes before the dispatches: imms that arrive before it would be counted
  // anyway, and none can arrive before the dispatch below.
  std::weak_ptr<Impl> weak = weak_from_this();
  const uint32_t imm = r->imm;
  Status s = engine.imms().expect(imm, r->expected, Completion::callback([weak, imm](const Status& st) {
                                                      if (auto i = weak.lock()) i->on_expectation(imm, st);
                                                    }),
                                  r->deadline);
  if (!s.ok()) {
    std::lock_guard lock(mu);
    by_id.erase(q.id);
    by_imm.erase(imm);
    imms.release(imm);
    counters.requests_started--;
    return s;
  }
  // Counted once start() can no longer take the request back (the metric has no decrement).
  metrics.started.add();
  for (auto& [k, bytes] : to_send) {
    auto id = engine.submit_send(r->sources[k].address, bytes, Completion::callback([weak, imm, k = k](const Status& st) {
                                   if (auto i = weak.lock()) i->on_dispatch_sent(imm, k, st);
                                 }));
    if (!id.ok()) {
      Deferred d;
      {
        std::lock_guard lock(mu);
        r->sources[k].state = Source::State::kDone;  // never sent
        fail_locked(*r, Status(id.status().code(), "decoder: dispatch to prefill rank " + std::to_string(r->sources[k].rank) +
                                                      " not sent: " + id.status().message()),
                    Clock::now(), d);
      }
      run(d);
      continue;
    }
    std::lock_guard lock(mu);
    counters.dispatches_sent++;
  }
  return ok_status();
}

void Decoder::Impl::fail_locked(Request& r, Status why, Clock::time_point now, Deferred& d) {
  if (r.poll == KvPoll::kSuccess || r.poll == KvPoll::kFailed) return;
  KV_LOG(kInfo, "decoder: request '%s' failed: %s", r.id.c_str(), why.to_string().c_str());
  r.poll = KvPoll::kFailed;
  r.error = std::move(why);
  counters.requests_failed++;
  metrics.failed.add();
  d.cancel_expectations.push_back(r.imm);
  cancel_at_sources_locked(r, now, d);
  settle_locked(r, now, d);
}

void Decoder::Impl::cancel_at_sources_locked(Request& r, Clock::time_point now, Deferred& d) {
  bool any = false;
  for (Source& s : r.sources) {
    if (s.state != Source::State::kDispatched && s.state != Source::State::kQuarantined) continue;
    d.messages.emplace_back(s.address, CancelMessage{r.id, r.imm, remaining_ms(r.deadline + options.quarantine, now)});
    counters.cancels_sent++;
    any = true;
  }
  if (any && !r.cancel_sent) {
    r.cancel_sent = true;
    r.confirm_deadline = now + options.cancel_confirm_timeout;
  }
}

void Decoder::Impl::settle_locked(Request& r, Clock::time_point now, Deferred& d) {
  if (r.reusable) return;
  if (r.poll == KvPoll::kSuccess) {
    for (Source& s : r.sources) s.state = Source::State::kDone;
  } else if (r.poll == KvPoll::kFailed) {
    for (Source& s : r.sources) {
      if (s.state == Source::State::kQuarantined && now >= s.until) s.state = Source::State::kDone;
      if (s.state != Source::State::kDone) return;
    }
  } else {
    return;
  }
  r.reusable = true;
  finished.push_back({r.id, r.poll == KvPoll::kSuccess ? ok_status() : r.error});
  by_imm.erase(r.imm);
  imms.release(r.imm);
  d.release_imms.push_back(r.imm);
  if (r.poll == KvPoll::kFailed) late_releases.emplace_back(now + options.quarantine, r.imm);
  settled.notify_all();
}

void Decoder::Impl::run(Deferred& d) {
  for (uint32_t imm : d.cancel_expectations) engine.imms().cancel_expectation(imm);
  for (uint32_t imm : d.release_imms) engine.imms().release(imm);
  for (auto& [to, body] : d.messages) send(to, std::move(body));
  d = Deferred{};
}

void Decoder::Impl::send(const DomainAddress& to, MessageBody body) {
  std::vector<uint8_t> bytes = encode_message({{type_of(body), Role::kDecoder, incarnation, self}, std::move(body)});
  auto id = engine.submit_send(to, bytes, Completion());
  if (!id.ok()) KV_LOG(kDebug, "decoder: send failed: %s", id.status().to_string().c_str());
}

Result<RequestStatus> Decoder::status(const std::string& id) const {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->by_id.find(id);
  if (it == impl_->by_id.end()) return not_found("decoder: no active request '" + id + "'");
  const Impl::Request& r = *it->second;
  RequestStatus s;
  s.poll = r.poll;
  s.error = r.error;
  s.pages_reusable = r.reusable;
  s.imms_expected = r.expected;
  if (r.poll == KvPoll::kSuccess) s.imms_arrived = r.expected;
  else if (!r.reusable) s.imms_arrived = impl_->engine.imms().count(r.imm);
  if (s.poll == KvPoll::kWaitingForInput && s.imms_arrived > 0) s.poll = KvPoll::kTransferring;
  return s;
}

KvPoll Decoder::poll(const std::string& id) const {
  auto s = status(id);
  return s.ok() ? s->poll : KvPoll::kFailed;
}

Status Decoder::cancel(const std::string& id) {
  Impl::Deferred d;
  {
    std::lock_guard lock(impl_->mu);
    auto it = impl_->by_id.find(id);
    if (it == impl_->by_id.end()) return not_found("decoder: no active request '" + id + "'");
    impl_->fail_locked(*it->second, cancelled("decoder: cancelled by the caller"), Clock::now(), d);
  }
  impl_->run(d);
  return ok_status();
}

std::vector<FinishedRequest> Decoder::get_finished() {
  std::lock_guard lock(impl_->mu);
  std::vector<FinishedRequest> out(impl_->finished.begin(), impl_->finished.end());
  impl_->finished.clear();
  for (const FinishedRequest& f : out) impl_->by_id.erase(f.id);
  return out;
}

std::vector<FinishedRequest> Decoder::wait_finished(std::chrono::milliseconds timeout) {
  {
    std::unique_lock lock(impl_->mu);
    impl_->settled.wait_for(lock, timeout, [&] { return !impl_->finished.empty(); });
  }
  return get_finished();
}

Status Decoder::shutdown(std::chrono::milliseconds wait) {
  Impl::Deferred d;
  {
    std::lock_guard lock(impl_->mu);
    if (impl_->stopped) return ok_status();
    impl_->stopped = true;
    for (auto& [id, r] : impl_->by_id) impl_->fail_locked(*r, stopped("decoder: shut down"), Clock::now(), d);
  }
  impl_->run(d);
  std::unique_lock lock(impl_->mu);
  const bool all = impl_->settled.wait_for(lock, wait, [&] {
    for (auto& [id, r] : impl_->by_id)
      if (!r->reusable) return false;
    return true;
  });
  if (all) return ok_status();
  return Status(ErrorCode::kDeadlineExceeded, "decoder: some requests' pages were not confirmed free in time");
}

const DomainAddress& Decoder::address() const { return impl_->self; }

DecoderStats Decoder::stats() const {
  std::lock_guard lock(impl_->mu);
  DecoderStats s = impl_->counters;
  s.active_requests = impl_->by_id.size();
  return s;
}

}  // namespace fabric_lib::kv

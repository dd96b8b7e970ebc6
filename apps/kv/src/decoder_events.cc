// The decoder's reactions: arriving messages, the imm expectation's sink, dispatch send
// completions, and the timer (heartbeats, liveness, confirmation timeouts, quarantine expiry).
#include "accept_message.h"
#include "decoder_impl.h"
#include "log.h"

namespace fabric_lib::kv {

void Decoder::Impl::on_expectation(uint32_t imm, const Status& st) {
  Deferred d;
  {
    std::lock_guard lock(mu);
    auto it = by_imm.find(imm);
    if (it == by_imm.end()) return;
    Request& r = *it->second;
    const Clock::time_point now = Clock::now();
    if (st.ok()) {
      if (r.poll == KvPoll::kFailed) return;  // it was cancelled as the last imm arrived: wait for the confirmations
      r.poll = KvPoll::kSuccess;
      counters.requests_succeeded++;
      metrics.succeeded.add();
      settle_locked(r, now, d);
    } else {
      Status why = st.code() == ErrorCode::kDeadlineExceeded
                       ? Status(ErrorCode::kDeadlineExceeded, "decoder: deadline passed with " +
                                                                  std::to_string(engine.imms().count(imm)) + " of " +
                                                                  std::to_string(r.expected) + " imms")
                       : st;
      fail_locked(r, std::move(why), now, d);
    }
  }
  run(d);
}

void Decoder::Impl::on_dispatch_sent(uint32_t imm, size_t k, const Status& st) {
  Deferred d;
  {
    std::lock_guard lock(mu);
    auto it = by_imm.find(imm);
    if (it == by_imm.end() || k >= it->second->sources.size()) return;
    Request& r = *it->second;
    Source& s = r.sources[k];
    const Clock::time_point now = Clock::now();
    if (s.state != Source::State::kSending) return;
    if (st.ok()) {
      s.state = Source::State::kDispatched;
      if (r.poll == KvPoll::kBootstrapping) {
        bool all = true;
        for (const Source& o : r.sources) all = all && o.state != Source::State::kSending;
        if (all) r.poll = KvPoll::kWaitingForInput;
      } else if (r.poll == KvPoll::kFailed) {
        cancel_at_sources_locked(r, now, d);  // it failed while the dispatch was on its way
        if (!r.cancel_sent) r.confirm_deadline = now + options.cancel_confirm_timeout;
      }
    } else {
      // The prefiller may or may not have it: treat its pages as possibly written until the grace ends.
      s.state = Source::State::kQuarantined;
      s.until = now + options.quarantine;
      counters.quarantined++;
      fail_locked(r, Status(st.code(), "decoder: dispatch to prefill rank " + std::to_string(s.rank) + " failed: " + st.message()),
                  now, d);
    }
    settle_locked(r, now, d);
  }
  run(d);
}

void Decoder::Impl::on_bytes(std::span<const uint8_t> bytes) {
  Deferred d;
  {
    std::lock_guard lock(mu);
    std::optional<Message> m = accept_message(bytes, Role::kPrefiller, counters, "decoder");
    if (!m) return;
    const Clock::time_point now = Clock::now();
    const DomainAddress& from = m->header.sender;
    if (peers.heard(from, m->header.incarnation, now)) {
      declare_dead_locked(from, "prefiller restarted (new incarnation)", now, d);
    }
    auto find = [&](const std::string& id, uint32_t imm) -> std::pair<Request*, Source*> {
      auto it = by_imm.find(imm);
      if (it == by_imm.end() || it->second->id != id) return {nullptr, nullptr};
      for (Source& s : it->second->sources)
        if (s.address == from) return {it->second.get(), &s};
      return {it->second.get(), nullptr};
    };
    if (const auto* c = std::get_if<CancelConfirmMessage>(&m->body)) {
      counters.confirms_received++;
      auto [r, s] = find(c->request_id, c->imm);
      if (!s) {
        counters.unexpected_messages++;
      } else {
        s->state = Source::State::kDone;
        settle_locked(*r, now, d);
      }
    } else if (const auto* j = std::get_if<RejectMessage>(&m->body)) {
      counters.rejects_received++;
      auto [r, s] = find(j->request_id, j->imm);
      if (!s) {
        counters.unexpected_messages++;
      } else {
        s->state = Source::State::kDone;  // nothing more will be written by it
        fail_locked(*r, Status(j->code, "prefill rank " + std::to_string(s->rank) + " refused: " + j->reason), now, d);
        settle_locked(*r, now, d);
      }
    } else if (!std::holds_alternative<HeartbeatMessage>(m->body)) {
      counters.unexpected_messages++;
      KV_LOG(kWarn, "decoder: dropped an unexpected %s", std::string(message_type_name(m->header.type)).c_str());
    }
  }
  run(d);
}

void Decoder::Impl::declare_dead_locked(const DomainAddress& peer, const std::string& why, Clock::time_point now, Deferred& d) {
  counters.peers_declared_dead++;
  KV_LOG(kWarn, "decoder: prefiller %s declared dead: %s", peer.to_hex().substr(0, 16).c_str(), why.c_str());
  std::vector<std::shared_ptr<Request>> involved;
  for (auto& [imm, r] : by_imm) {
    bool hit = false;
    for (Source& s : r->sources) {
      if (s.address != peer || s.state == Source::State::kDone) continue;
      hit = true;
      if (s.state != Source::State::kQuarantined) {
        s.state = Source::State::kQuarantined;
        s.until = now + options.quarantine;
        counters.quarantined++;
      }
    }
    if (hit) involved.push_back(r);
  }
  // (fail and settle may remove requests from by_imm: not while iterating it)
  for (auto& r : involved) {
    fail_locked(*r, Status(ErrorCode::kPeerUnreachable, "decoder: prefiller " + why), now, d);
    settle_locked(*r, now, d);
  }
}

void Decoder::Impl::tick() {
  Deferred d;
  {
    std::lock_guard lock(mu);
    const Clock::time_point now = Clock::now();
    // Confirmation timeouts and quarantine expiry.
    std::vector<std::shared_ptr<Request>> failed;
    for (auto& [imm, r] : by_imm) {
      if (r->poll != KvPoll::kFailed) {
        // The expectation's deadline ends a request; this is the backstop should its sink be late.
        if (now > r->deadline + options.liveness.peer_timeout)
          failed.push_back(r);
        continue;
      }
      for (Source& s : r->sources) {
        if ((s.state == Source::State::kDispatched || s.state == Source::State::kSending) && r->cancel_sent &&
            now >= r->confirm_deadline) {
          s.state = Source::State::kQuarantined;
          s.until = now + options.quarantine;
          counters.quarantined++;
        }
      }
      failed.push_back(r);
    }
    for (auto& r : failed) {
      if (r->poll != KvPoll::kFailed) fail_locked(*r, Status(ErrorCode::kDeadlineExceeded, "decoder: deadline passed"), now, d);
      settle_locked(*r, now, d);
    }
    // Imms of failed requests are forgotten again after the grace period (late writes).
    for (auto it = late_releases.begin(); it != late_releases.end();) {
      if (now >= it->first) {
        d.release_imms.push_back(it->second);
        it = late_releases.erase(it);
      } else {
        ++it;
      }
    }
    // Imms arriving for a request are evidence that its sources are alive.
    for (auto& [imm, r] : by_imm) {
      if (r->poll == KvPoll::kSuccess || r->poll == KvPoll::kFailed) continue;
      const uint64_t c = engine.imms().count(imm);
      if (c <= r->last_count) continue;
      r->last_count = c;
      for (const Source& s : r->sources)
        if (s.state == Source::State::kDispatched) peers.touch(s.address, now);
    }
    // Liveness: sources that may still write are watched.
    auto active = [&](const DomainAddress& a) {
      for (auto& [imm, r] : by_imm)
        for (const Source& s : r->sources)
          if (s.address == a && (s.state == Source::State::kSending || s.state == Source::State::kDispatched)) return true;
      return false;
    };
    for (const DomainAddress& dead : peers.overdue(now, options.liveness.peer_timeout, active)) {
      declare_dead_locked(dead, "silent for more than " + std::to_string(options.liveness.peer_timeout.count()) + " ms", now, d);
    }
    if (now >= next_heartbeat) {
      next_heartbeat = now + options.liveness.heartbeat_interval;
      std::vector<DomainAddress> targets;
      uint32_t n = 0;
      for (auto& [imm, r] : by_imm) {
        if (r->reusable) continue;
        ++n;
        for (const Source& s : r->sources) {
          if (s.state == Source::State::kDone) continue;
          if (std::find(targets.begin(), targets.end(), s.address) == targets.end()) targets.push_back(s.address);
        }
      }
      for (const DomainAddress& t : targets) {
        d.messages.emplace_back(t, HeartbeatMessage{n});
        counters.heartbeats_sent++;
      }
    }
  }
  run(d);
}

}  // namespace fabric_lib::kv

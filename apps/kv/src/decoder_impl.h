// Decoder internals (decoder.cc: requests and the API; decoder_events.cc: messages, imm sinks,
// send completions and the timer).
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "common.h"
#include "fabric_lib/kv/decoder.h"
#include "kv_metrics.h"
#include "peer_table.h"
#include "ticker.h"

namespace fabric_lib::kv {

struct Decoder::Impl : std::enable_shared_from_this<Decoder::Impl> {
  // One prefill rank a request was dispatched to.
  struct Source {
    enum class State : uint8_t {
      kSending,      // dispatch submitted, not yet delivered
      kDispatched,   // delivered: it may be writing
      kDone,         // will never write again (success, confirmation, reject, never sent)
      kQuarantined,  // may still write (dead or unconfirmed) until `until`
    };
    uint32_t rank = 0;
    DomainAddress address;
    State state = State::kSending;
    Clock::time_point until{};
    std::vector<uint8_t> dispatch;  // encoded, until sent
  };
  struct Request {
    std::string id;
    uint32_t imm = 0;
    uint64_t expected = 0;
    Clock::time_point deadline{};
    std::vector<Source> sources;
    KvPoll poll = KvPoll::kBootstrapping;
    Status error;
    bool cancel_sent = false;
    Clock::time_point confirm_deadline{};
    bool reusable = false;  // queued for get_finished, imm slot returned
    uint64_t last_count = 0;  // imms seen at the last tick (progress counts as liveness)
  };

  Impl(TransferEngine& e, DecoderOptions o);

  // --- decoder.cc
  Status start(DecodeRequest request);
  // Work collected under the lock and done after it: engine calls may deliver callbacks that
  // take the lock again.
  struct Deferred {
    std::vector<std::pair<DomainAddress, MessageBody>> messages;
    std::vector<uint32_t> cancel_expectations;
    std::vector<uint32_t> release_imms;
  };
  // Marks `r` failed (once), cancelling at its sources.
  void fail_locked(Request& r, Status why, Clock::time_point now, Deferred& d);
  // Checks whether `r`'s pages are reusable; if so queues it for get_finished and frees its imm.
  void settle_locked(Request& r, Clock::time_point now, Deferred& d);
  void cancel_at_sources_locked(Request& r, Clock::time_point now, Deferred& d);

  // --- decoder_events.cc
  void on_bytes(std::span<const uint8_t> bytes);
  void on_expectation(uint32_t imm, const Status& s);
  void on_dispatch_sent(uint32_t imm, size_t source, const Status& s);
  void tick();
  void declare_dead_locked(const DomainAddress& peer, const std::string& why, Clock::time_point now, Deferred& d);
  void run(Deferred& d);
  void send(const DomainAddress& to, MessageBody body);

  TransferEngine& engine;
  DecoderOptions options;
  DomainAddress self;
  uint64_t incarnation;
  std::unique_ptr<Ticker> ticker;

  mutable std::mutex mu;
  std::condition_variable settled;  // a request's pages became reusable
  ImmAllocator imms;
  std::unordered_map<std::string, std::shared_ptr<Request>> by_id;
  std::unordered_map<uint32_t, std::shared_ptr<Request>> by_imm;
  std::deque<FinishedRequest> finished;
  PeerTable peers;
  std::vector<std::pair<Clock::time_point, uint32_t>> late_releases;  // imms to forget again later
  Clock::time_point next_heartbeat{};
  bool stopped = false;
  DecoderStats counters;
  KvStateMetrics metrics;  // the same events on the engine's MetricsRegistry
};

}  // namespace fabric_lib::kv

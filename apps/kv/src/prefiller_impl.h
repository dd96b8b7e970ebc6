// Prefiller internals (prefiller.cc: the API, dispatches, cancels; prefiller_writes.cc: posting
// the writes, their completions, and the timer).
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "common.h"
#include "fabric_lib/kv/prefiller.h"
#include "kv_metrics.h"
#include "peer_table.h"
#include "ticker.h"

namespace fabric_lib::kv {

struct Prefiller::Impl : std::enable_shared_from_this<Prefiller::Impl> {
  // One dispatch: the writes to one decode rank for one request.
  struct Dest : std::enable_shared_from_this<Dest> {
    enum class State : uint8_t {
      kActive,    // writing as progress allows
      kStopping,  // cancelled: confirm once drained
      kFailing,   // failed here: reject once drained
      kSilent,    // its decoder is dead: drain, tell nobody
      kEnded,     // nothing in flight, nothing more to post
    };
    DispatchMessage d;
    DomainAddress decoder;
    PairPlan plan;
    Clock::time_point deadline{};
    State state = State::kActive;
    Status error;
    bool succeeded = false;            // ended after every write completed Ok
    std::vector<uint32_t> sent;        // per layer: request pages [0, sent) posted (or held by the decoder)
    bool tail_posted = false;
    uint32_t outstanding = 0;
    uint64_t completed = 0;
    uint64_t next_token = 0;
    // Posted, not completed writes (token -> id): what the engine's cancel(TransferId) will drop.
    std::unordered_map<uint64_t, TransferId> inflight;
  };
  struct Request : std::enable_shared_from_this<Request> {
    std::string id;
    bool known = false;  // add_request was called
    PrefillRequest info;
    Clock::time_point deadline = Clock::time_point::max();
    std::vector<uint32_t> ready_tokens;  // per layer
    bool tail_ready = false;
    bool expected_known = false;
    uint32_t decode_tp = 0;
    std::vector<uint32_t> expected_ranks;
    std::map<uint32_t, std::shared_ptr<Dest>> dests;  // by decode rank
    bool any_posted = false;
    bool failed = false;
    Status error;
    bool reported = false;
  };
  struct Pass {
    std::vector<std::pair<std::shared_ptr<Request>, uint32_t>> entries;  // request, tokens_end
    uint64_t progress = 0;
  };
  struct Deferred {
    std::vector<std::pair<DomainAddress, MessageBody>> messages;
  };

  Impl(TransferEngine& e, PrefillerOptions o);

  // prefiller.cc
  Status progress(uint64_t pass, uint64_t value);
  void on_bytes(std::span<const uint8_t> bytes);
  void on_dispatch(DispatchMessage m, const DomainAddress& from, Clock::time_point now, Deferred& d);
  void on_cancel(const CancelMessage& m, const DomainAddress& from, Clock::time_point now, Deferred& d);
  void reject(const DispatchMessage& m, const DomainAddress& to, Status why, Deferred& d);
  std::shared_ptr<Request>& request_locked(const std::string& id);
  RequestStatus status_locked(const Request& r) const;
  void run(Deferred& d);
  void send(const DomainAddress& to, MessageBody body);

  // prefiller_writes.cc
  // Posts what progress allows for layers [first, last) (and the tail) of every active dest.
  void pump_locked(Request& r, uint32_t first, uint32_t last);
  void post_layer_locked(Request& r, Dest& dest, uint32_t layer, uint32_t from, uint32_t to);
  void post_tail_locked(Request& r, Dest& dest);
  void on_write_done(const std::shared_ptr<Request>& r, const std::shared_ptr<Dest>& dest, uint64_t token, const Status& st);
  // Stops a dest's future writes; `state` says what to do once drained.
  void stop_dest_locked(Request& r, Dest& dest, Dest::State state, Status why);
  // Ends drained dests (confirm / reject / success) and queues finished requests.
  void settle_locked(Request& r, Deferred& d);
  void fail_request_locked(Request& r, Status why);
  void tick();

  TransferEngine& engine;
  PrefillerOptions options;
  DomainAddress self;
  uint64_t incarnation;
  std::unique_ptr<Ticker> ticker;

  mutable std::mutex mu;
  std::condition_variable settled;
  std::unordered_map<std::string, std::shared_ptr<Request>> requests;
  std::map<uint64_t, Pass> passes;
  uint64_t next_pass = 1;
  std::map<std::pair<std::string, uint32_t>, Clock::time_point> tombstones;  // cancelled unknown dispatches
  std::deque<FinishedRequest> finished;
  PeerTable peers;
  Clock::time_point next_heartbeat{};
  bool stopping = false;
  PrefillerStats counters;
  KvStateMetrics metrics;  // requests by state on the engine's MetricsRegistry
};

}  // namespace fabric_lib::kv

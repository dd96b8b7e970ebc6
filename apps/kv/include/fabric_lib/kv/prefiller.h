// The prefill side of KV transfer (one prefill TP rank). Dispatches arrive from decode ranks over
// SEND; the framework tells the prefiller which of its own pages hold each request (add_request)
// and reports GPU progress per forward pass: after layer l's attention, that layer's pages of
// every request of the pass are written to every decode rank that dispatched for it (paged
// writes, head slices by page offset and stride, plan.h). The tail context is written last, as
// one write, once the pass that computed the request's last tokens says its tail is ready.
//
// Progress comes from layer_done() / tail_ready() on the CPU, or from a UVM watcher whose word the
// model's stream bumps (attach_progress_watcher(); usable under CUDA graph replay).
//
// Chunked prefill: a pass covers tokens up to `tokens_end` of each request; a page is written
// once, by the first pass after which it is complete (the last page: by the final pass), so
// chunking changes neither the pages moved nor the imm count. Dispatches may arrive before or
// after the pass that computes their pages: late ones catch up at once.
//
// Cancellation: a cancel stops further writes for that dispatch; the confirmation goes out once
// every posted write has completed (tracked through the writes' completions). A decoder silent
// for peer_timeout is declared dead: its dispatches stop the same way. Every dispatch ends by
// its deadline; a refused or aborted one is answered with a Reject saying why.
//
// The Prefiller owns the engine's receives (it calls post_recvs). Thread safety: every method
// may be called from any thread, including the watcher thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fabric_lib/fabric_lib.h"
#include "fabric_lib/kv/layout.h"
#include "fabric_lib/kv/plan.h"
#include "fabric_lib/kv/request_state.h"

namespace fabric_lib::kv {

struct PrefillerOptions {
  KvLayout layout;
  RankShape rank;                       // this prefill rank (its TP shape and page packing)
  std::vector<MrRegistration> regions;  // the cache and the tail sources (local sources)
  KvMemoryLayout memory;
  LivenessOptions liveness;
  size_t recv_buffers = 256;
  size_t max_message_bytes = 64 * 1024;  // the engine's (TransferEngineBuilder::max_message_bytes)
  // How long a cancellation of an unknown dispatch is remembered at most (a dispatch that arrives
  // after its cancel is refused).
  std::chrono::milliseconds max_tombstone{60000};
};

// A request the framework prefills here: which local pages hold its tokens.
struct PrefillRequest {
  std::string id;
  uint32_t num_tokens = 0;
  std::vector<uint32_t> pages;  // pages_for_tokens(num_tokens) local pages, in token order
  // Where the tail context will be (logits etc.); its length is what the decoder asked for.
  uint16_t tail_region = 0;
  uint64_t tail_offset = 0;
  // The request fails if its dispatches have not all arrived and completed by then.
  std::chrono::milliseconds timeout{30000};
  // The decode instance's TP shape, when the framework knows it (0 = learn it from the first
  // dispatch). Then a rank that supplies no decode rank succeeds at once, without dispatches.
  uint32_t decode_tp = 0;
  KvPacking decode_packing = KvPacking::kSeparate;
};

// One request's share of a forward pass: its tokens [.., tokens_end) are computed by the pass.
struct PassEntry {
  std::string id;
  uint32_t tokens_end = 0;
};

struct PrefillerStats {
  uint64_t dispatches_received = 0;
  uint64_t dispatches_rejected = 0;
  uint64_t paged_writes_posted = 0;  // submit_paged_writes calls
  uint64_t pages_posted = 0;         // their pages (one WR each)
  uint64_t tail_writes_posted = 0;
  uint64_t writes_completed = 0;    // paged-write and tail requests that completed Ok
  uint64_t writes_failed = 0;
  uint64_t writes_cancelled = 0;  // dropped by the engine's cancel() when a request stopped
  uint64_t cancels_received = 0;
  uint64_t confirms_sent = 0;
  uint64_t heartbeats_sent = 0;
  uint64_t messages_received = 0;
  uint64_t malformed_messages = 0;
  uint64_t unexpected_messages = 0;
  uint64_t peers_declared_dead = 0;
  size_t active_requests = 0;
};

class Prefiller {
 public:
  static Result<std::unique_ptr<Prefiller>> create(TransferEngine& engine, PrefillerOptions options);
  ~Prefiller();  // shutdown()
  Prefiller(const Prefiller&) = delete;
  Prefiller& operator=(const Prefiller&) = delete;

  Status add_request(PrefillRequest request);
  // Starts a forward pass over `entries`; returns its id (>= 1). Each entry's tokens_end must not
  // go back, and must not pass the request's num_tokens.
  Result<uint64_t> begin_pass(const std::vector<PassEntry>& entries);
  // Layer `layer` of the pass is computed: its pages go out. Layers may be reported out of order
  // or coalesced (progress(n) = layers 0..n-1 are done).
  Status layer_done(uint64_t pass, uint32_t layer) { return progress(pass, layer + 1); }
  // Every layer is done and the tails of requests completed by this pass are in place.
  Status tail_ready(uint64_t pass) { return progress(pass, num_layers() + 1); }
  Status progress(uint64_t pass, uint64_t value);

  // The word a GPU stream writes progress into: after layer l of pass p it stores
  // progress_word_value(p, l + 1), after the tail progress_word_value(p, num_layers + 1). The
  // watcher thread calls progress() for each change it sees (coalesced values are fine).
  Result<UvmWatcher> attach_progress_watcher();
  static constexpr uint64_t progress_word_value(uint64_t pass, uint64_t progress) { return (pass << 16) | progress; }

  // Gives up on a request: stops its writes; each decoder gets a Reject once its posted writes
  // have completed.
  Status abort(const std::string& id, Status why);
  Result<RequestStatus> status(const std::string& id) const;
  KvPoll poll(const std::string& id) const;
  // Requests whose transfers all ended (their source pages are free), each once, then forgotten.
  std::vector<FinishedRequest> get_finished();
  // get_finished(), after waiting up to `timeout` for at least one request to finish.
  std::vector<FinishedRequest> wait_finished(std::chrono::milliseconds timeout);
  // Refuses new dispatches, aborts unfinished requests and waits up to `wait` for their posted
  // writes. Idempotent.
  Status shutdown(std::chrono::milliseconds wait = std::chrono::milliseconds(3000));

  uint32_t num_layers() const;
  const DomainAddress& address() const;
  PrefillerStats stats() const;

  struct Impl;

 private:
  explicit Prefiller(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace fabric_lib::kv

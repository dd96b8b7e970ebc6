// The decode side of KV transfer (one decode TP rank). For each request it allocates a
// per-request imm, registers the imm expectation (with the request's deadline) BEFORE it
// dispatches, sends a dispatch message to every prefill rank that supplies it (plan.h), and
// reports success once the count is reached: no completion message exists.
//
// Failure semantics (docs/kv.md): every request ends, Success or Failed with a reason, by its
// deadline. A failed request's pages stay owned by the transfer until no prefiller can write them:
// the decoder cancels at every source and waits for its confirmation; a source that is declared
// dead (silent for peer_timeout), or whose confirmation does not come within
// cancel_confirm_timeout, has its pages quarantined for `quarantine` before they are reusable.
// get_finished() lists a request only once its pages are reusable.
//
// The Decoder owns the engine's receives (it calls post_recvs): run one Decoder, or one
// Prefiller, per engine. Thread safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fabric_lib/fabric_lib.h"
#include "fabric_lib/kv/imm.h"
#include "fabric_lib/kv/layout.h"
#include "fabric_lib/kv/plan.h"
#include "fabric_lib/kv/request_state.h"

namespace fabric_lib::kv {

struct DecoderOptions {
  KvLayout layout;
  RankShape rank;                       // this decode rank
  std::vector<MrRegistration> regions;  // registered with Access::kRemoteWrite: the cache and tail slots
  KvMemoryLayout memory;                // where the pages are in `regions`
  uint32_t max_requests = 4096;         // requests in flight (imm slots), <= kImmMaxSlots
  uint32_t imm_tag = kDefaultImmTag;    // the decoder's imm namespace (imm.h)
  LivenessOptions liveness;
  std::chrono::milliseconds cancel_confirm_timeout{2000};
  std::chrono::milliseconds quarantine{5000};  // grace period for pages a dead prefiller may still write
  size_t recv_buffers = 64;
  size_t max_message_bytes = 64 * 1024;  // the engine's (TransferEngineBuilder::max_message_bytes)
};

// Where a request's prefill runs: the prefill instance's TP shape and each rank's main address.
struct PrefillInstance {
  uint32_t tp_size = 1;
  KvPacking packing = KvPacking::kSeparate;
  std::vector<DomainAddress> ranks;  // tp_size entries
};

struct DecodeRequest {
  std::string id;  // unique among the decoder's unfinished requests, 1..256 bytes
  PrefillInstance prefill;
  uint32_t num_tokens = 0;
  // Pages [0, first_page) are already here (prefix reuse) and are not transferred; `pages` are the
  // destination pages of request pages first_page.. (pages_for_tokens(num_tokens) - first_page).
  uint32_t first_page = 0;
  std::vector<uint32_t> pages;
  // The tail context (logits, hidden state, first token: bytes fabric-lib does not interpret),
  // written last as one write; tail_length 0 = none.
  uint16_t tail_region = 0;
  uint64_t tail_offset = 0;
  uint64_t tail_length = 0;
  std::chrono::milliseconds timeout{30000};
};

struct DecoderStats {
  uint64_t requests_started = 0;
  uint64_t requests_succeeded = 0;
  uint64_t requests_failed = 0;
  uint64_t dispatches_sent = 0;
  uint64_t cancels_sent = 0;
  uint64_t confirms_received = 0;
  uint64_t rejects_received = 0;
  uint64_t heartbeats_sent = 0;
  uint64_t messages_received = 0;
  uint64_t malformed_messages = 0;  // did not decode (logged, counted, dropped)
  uint64_t unexpected_messages = 0; // decoded, but a type or request the decoder does not expect
  uint64_t peers_declared_dead = 0;
  uint64_t quarantined = 0;         // request sources whose pages went through the grace period
  size_t active_requests = 0;       // not yet reported by get_finished()
};

class Decoder {
 public:
  // Starts receiving on `engine` (which must outlive the Decoder). InvalidArgument for a layout,
  // rank or memory the others do not fit.
  static Result<std::unique_ptr<Decoder>> create(TransferEngine& engine, DecoderOptions options);
  ~Decoder();  // shutdown()
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;

  // Starts a request. Synchronous errors (bad pages, unknown id shape, no free imm, a prefill TP the
  // layout does not allow) have no side effect; once accepted, the request ends by its deadline.
  Status start(DecodeRequest request);
  // NotFound for an id that is not active (never started, or already returned by get_finished()).
  Result<RequestStatus> status(const std::string& id) const;
  KvPoll poll(const std::string& id) const;  // kFailed for an unknown id
  // Cancels an unfinished request: it fails with Cancelled at once; its pages become reusable when
  // every prefiller confirmed (or was quarantined). No-op (ok) for a finished request.
  Status cancel(const std::string& id);
  // Requests that ended since the last call and whose pages are reusable; each once, then forgotten.
  std::vector<FinishedRequest> get_finished();
  // get_finished(), after waiting up to `timeout` for at least one request to finish.
  std::vector<FinishedRequest> wait_finished(std::chrono::milliseconds timeout);
  // Cancels every unfinished request and waits up to `wait` for their pages to become reusable;
  // stops receiving. Later starts fail with Stopped. Idempotent.
  Status shutdown(std::chrono::milliseconds wait = std::chrono::milliseconds(3000));

  const DomainAddress& address() const;  // the engine's main address (what prefillers reply to)
  DecoderStats stats() const;

  struct Impl;

 private:
  explicit Decoder(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace fabric_lib::kv

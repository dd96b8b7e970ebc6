// Per-request state both roles report, shaped after the frameworks' own: KvPoll mirrors SGLang's
// disaggregation KVPoll, and get_finished() (Decoder, Prefiller) mirrors vLLM's KV-connector query
// of finished request ids, so adapters to either are thin.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "fabric_lib/fabric_lib.h"

namespace fabric_lib::kv {

enum class KvPoll : uint8_t {
  kBootstrapping = 0,    // decoder: dispatches being sent; prefiller: waiting for the dispatches
  kWaitingForInput = 1,  // dispatched (decoder) / all dispatches here (prefiller); nothing moved yet
  kTransferring = 2,     // pages are moving
  kSuccess = 3,          // decoder: every expected imm arrived; prefiller: every write completed
  kFailed = 4,           // ended with an error (RequestStatus::error says which)
};
std::string_view kv_poll_name(KvPoll poll);

struct RequestStatus {
  KvPoll poll = KvPoll::kBootstrapping;
  Status error;  // why it failed (ok unless kFailed)
  // Decoder: no prefiller can write into the request's pages any more (true on success; on
  // failure once every prefiller confirmed, refused, or its quarantine ran out).
  // Prefiller: no write of the request is in flight or will be posted (its source pages are free).
  bool pages_reusable = false;
  uint64_t imms_expected = 0;  // decoder only
  uint64_t imms_arrived = 0;   // decoder only (counted, not consumed)
};

// One entry of get_finished(): a request that ended and whose pages may now be reused.
struct FinishedRequest {
  std::string id;
  Status status;  // ok: success
};

// Heartbeats both ways over SEND: each side sends one every `heartbeat_interval` to every peer it
// shares unfinished requests with; a peer heard from for no longer than `peer_timeout` (by any
// message) is declared dead and its requests fail.
struct LivenessOptions {
  std::chrono::milliseconds heartbeat_interval{200};
  std::chrono::milliseconds peer_timeout{2000};
};

}  // namespace fabric_lib::kv

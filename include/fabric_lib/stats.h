// EngineStats: counters of an engine's activity since it was built (TransferEngine::stats()).
#pragma once

#include <cstdint>

namespace fabric_lib {

struct EngineStats {
  uint64_t requests_submitted = 0;
  uint64_t requests_completed = 0;  // delivered Ok
  uint64_t requests_failed = 0;     // delivered with an error (Cancelled included)
  uint64_t wrs_posted = 0;
  uint64_t imms_received = 0;
  uint64_t messages_received = 0;
  uint64_t deadlines_exceeded = 0;  // requests ended by their deadline
  uint64_t paths_failed = 0;        // path failures (a domain to a peer)
  uint64_t peers_unreachable = 0;   // times a peer became unreachable
  uint64_t groups_abandoned = 0;    // groups whose worker got stuck inside the provider (docs/failure-semantics.md)
};

}  // namespace fabric_lib

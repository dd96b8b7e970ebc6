// EngineStats: counters of an engine's activity since it was built (TransferEngine::stats()).
#pragma once

#include <cstdint>
#include <vector>

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
  // WRs posted per domain index, summed over groups: entry d counts the WRs posted on each
  // group's domain d (the d of a Pinned{d} route). Its entries add up to wrs_posted (each counter
  // is read on its own, so while WRs are being posted they may differ briefly).
  std::vector<uint64_t> wrs_posted_by_domain;
  // The reordering wrapper (TransferEngineBuilder::simulate_unordered_network), summed over every
  // domain: windows of two or more WRs posted in shuffled order, and completions or imms held
  // back for later polls. Both stay 0 when the wrapper is off.
  uint64_t unordered_windows_shuffled = 0;
  uint64_t unordered_events_held = 0;
};

}  // namespace fabric_lib

// Health of the paths to each peer, as TransferEngine::peer_status() reports it and
// TransferEngineBuilder::on_health_event() announces its changes (docs/failure-semantics.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "fabric_lib/domain_address.h"
#include "fabric_lib/status.h"

namespace fabric_lib {

// How well a peer (a remote group, named by its main address) can be reached.
enum class PeerHealth : uint8_t {
  kHealthy,      // every path (local domain i <-> the peer's domain i) works
  kDegraded,     // some paths failed; traffic uses the others
  kUnreachable,  // no path works: its operations fail with PeerUnreachable
};

struct PeerStatus {
  DomainAddress address;        // the peer's domain-0 address
  PeerHealth health = PeerHealth::kHealthy;
  std::vector<bool> paths_up;   // per domain of the group
  uint32_t inflight = 0;        // WRs in flight to it
  Status last_error;
};

// A change of a path's or a peer's health.
struct HealthEvent {
  size_t group = 0;
  DomainAddress peer;
  int domain = -1;     // the path that changed; -1 when the whole peer changed
  bool up = false;     // the path (or peer) works again
  PeerHealth health = PeerHealth::kHealthy;  // the peer's health after the change
  Status reason;
};
// Runs on the engine's callback thread.
using HealthCallback = std::function<void(const HealthEvent& event)>;

}  // namespace fabric_lib

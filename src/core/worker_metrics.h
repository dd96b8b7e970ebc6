// The metrics of one group (one GroupWorker): per operation type, per domain, per peer, and its
// health events. Written by the group's progress owner (metric_cells.h), read by
// TransferEngine::metrics() on any thread while the worker runs. Each block sits on its own cache
// lines, so a reader never shares a line with another group's writer.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "core/metric_cells.h"
#include "fabric_lib/health.h"
#include "fabric_lib/metrics.h"
#include "fabric_lib/stats.h"

namespace fabric_lib::detail {

struct alignas(64) OpCells {
  OwnedCounter wrs_posted;
  OwnedCounter wrs_completed;
  OwnedCounter wrs_failed[kNumErrorCodes];
  // Requests that ended Ok, counted by the group's progress owner: a plain store where a shared
  // counter cost every request a locked instruction. The shared cell takes an Ok delivered off
  // the owner (GroupWorker::deliver's on_owner false: an abandoned group's requests, which today
  // always fail), so no path can race the owner's store. Read as the sum (completed()).
  OwnedCounter requests_completed_by_owner;
  SharedCounter requests_completed_off_owner;
  SharedCounter requests_failed[kNumErrorCodes];  // rare: no need to split them
  uint64_t completed() const { return requests_completed_by_owner.get() + requests_completed_off_owner.get(); }
  OwnedHistogram request_latency;
  OwnedHistogram submit_to_post;
};

struct alignas(64) DomainCells {
  OwnedCounter wrs_posted;
  OwnedCounter wrs_completed;
  OwnedCounter wrs_failed;
  OwnedCounter bytes_written;
  OwnedCounter imms_received;
  OwnedCounter inflight;  // a mirror of the worker's count of WRs the provider holds
};

struct alignas(64) PeerCells {
  std::vector<uint8_t> key;  // the peer's domain-0 address (set before the cells are published)
  uint32_t paths = 0;
  std::atomic<uint8_t> health{static_cast<uint8_t>(PeerHealth::kHealthy)};
  std::atomic<uint32_t> paths_up{0};
  OwnedCounter wrs_posted;
  OwnedCounter wrs_completed;
  OwnedCounter wrs_failed;
  OwnedCounter bytes_written;
  OwnedCounter inflight;
  OwnedCounter path_failures;
  OwnedCounter path_recoveries;
  OwnedCounter times_unreachable;
  OwnedCounter retries;
  OwnedHistogram wr_latency;
};

struct alignas(64) GroupEventCells {
  OwnedCounter messages_received;
  OwnedCounter deadlines_exceeded;
  OwnedCounter stalls_detected;
  OwnedCounter probe_failures;
  OwnedCounter path_failures;
  OwnedCounter path_recoveries;
  OwnedCounter peers_unreachable;
  OwnedCounter peer_retries;
};

class WorkerMetrics {
 public:
  // `detailed`: latency histograms and per-peer cells are kept (TransferEngineBuilder::metrics()).
  WorkerMetrics(size_t group, size_t domains, bool detailed);

  bool detailed() const { return detailed_; }
  OpCells& op(uint8_t op) { return ops_[op]; }
  DomainCells& domain(size_t d) { return domains_[d]; }
  GroupEventCells& events() { return events_; }
  // Worker: the cells of a new peer, published to readers (null when not detailed). Called once
  // per peer; the cells live as long as this object.
  PeerCells* add_peer(std::span<const uint8_t> key, size_t paths);
  // Adds this group's totals to `s` (any thread): the counters EngineStats sums, read straight
  // from the cells — no snapshot, no per-peer work, nothing allocated beyond s's per-domain
  // vector — so stats() stays cheap enough to poll in a loop.
  void add_totals(EngineStats& s) const;
  // Names of the domains, for the snapshot (set once, before the worker runs).
  void set_domain_names(std::vector<std::string> names) { domain_names_ = std::move(names); }

  // Adds this group's values to `out` (any thread): ops (sized kNumOpTypes by the caller),
  // domains and peers appended, the event counters summed.
  void read_into(Metrics& out) const;

 private:
  const size_t group_;
  const bool detailed_;
  OpCells ops_[kNumOpTypes];
  std::vector<DomainCells> domains_;
  GroupEventCells events_;
  std::vector<std::string> domain_names_;
  mutable std::mutex peers_mu_;  // guards the list, not the cells: the worker appends rarely
  std::deque<PeerCells> peers_;
};

}  // namespace fabric_lib::detail

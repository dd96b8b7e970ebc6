#include "core/worker_metrics.h"

namespace fabric_lib::detail {
namespace {

// Adds the nonzero per-code counts to `out` (merging codes already there: other groups').
template <typename Counter>
void read_codes(const Counter (&cells)[kNumErrorCodes], std::vector<ErrorCount>& out) {
  for (size_t c = 1; c < kNumErrorCodes; ++c) {
    const uint64_t n = cells[c].get();
    if (n == 0) continue;
    bool merged = false;
    for (ErrorCount& e : out) {
      if (static_cast<size_t>(e.code) == c) {
        e.count += n;
        merged = true;
      }
    }
    if (!merged) out.push_back({static_cast<ErrorCode>(c), n});
  }
}

}  // namespace

WorkerMetrics::WorkerMetrics(size_t group, size_t domains, bool detailed)
    : group_(group), detailed_(detailed), domains_(domains) {}

PeerCells* WorkerMetrics::add_peer(std::span<const uint8_t> key, size_t paths) {
  if (!detailed_) return nullptr;
  std::lock_guard lock(peers_mu_);
  PeerCells& cells = peers_.emplace_back();
  cells.key.assign(key.begin(), key.end());
  cells.paths = static_cast<uint32_t>(paths);
  cells.paths_up.store(static_cast<uint32_t>(paths), std::memory_order_relaxed);
  return &cells;
}

void WorkerMetrics::add_totals(EngineStats& s) const {
  for (const OpCells& c : ops_) {
    s.requests_completed += c.completed();
    for (size_t code = 1; code < kNumErrorCodes; ++code) s.requests_failed += c.requests_failed[code].get();
  }
  if (s.wrs_posted_by_domain.size() < domains_.size()) s.wrs_posted_by_domain.resize(domains_.size());
  for (size_t d = 0; d < domains_.size(); ++d) {
    const uint64_t posted = domains_[d].wrs_posted.get();
    s.wrs_posted += posted;
    s.wrs_posted_by_domain[d] += posted;
    s.imms_received += domains_[d].imms_received.get();
  }
  s.messages_received += events_.messages_received.get();
  s.deadlines_exceeded += events_.deadlines_exceeded.get();
  s.paths_failed += events_.path_failures.get();
  s.peers_unreachable += events_.peers_unreachable.get();
}

void WorkerMetrics::read_into(Metrics& out) const {
  for (size_t o = 0; o < kNumOpTypes && o < out.ops.size(); ++o) {
    const OpCells& c = ops_[o];
    OpMetrics& m = out.ops[o];
    m.wrs_posted += c.wrs_posted.get();
    m.wrs_completed += c.wrs_completed.get();
    read_codes(c.wrs_failed, m.wrs_failed);
    m.requests_completed += c.completed();
    read_codes(c.requests_failed, m.requests_failed);
    c.request_latency.read_into(m.request_latency);
    c.submit_to_post.read_into(m.submit_to_post);
  }
  for (size_t d = 0; d < domains_.size(); ++d) {
    const DomainCells& c = domains_[d];
    DomainMetrics m;
    m.group = group_;
    m.domain = d;
    if (d < domain_names_.size()) m.name = domain_names_[d];
    m.wrs_posted = c.wrs_posted.get();
    m.wrs_completed = c.wrs_completed.get();
    m.wrs_failed = c.wrs_failed.get();
    m.bytes_written = c.bytes_written.get();
    m.imms_received = c.imms_received.get();
    m.inflight = c.inflight.get();
    out.domains.push_back(std::move(m));
  }
  out.messages_received += events_.messages_received.get();
  out.deadlines_exceeded += events_.deadlines_exceeded.get();
  out.stalls_detected += events_.stalls_detected.get();
  out.probe_failures += events_.probe_failures.get();
  out.path_failures += events_.path_failures.get();
  out.path_recoveries += events_.path_recoveries.get();
  out.peers_unreachable += events_.peers_unreachable.get();
  out.peer_retries += events_.peer_retries.get();

  std::lock_guard lock(peers_mu_);
  for (const PeerCells& c : peers_) {
    PeerMetrics m;
    m.group = group_;
    Result<DomainAddress> address = DomainAddress::from_bytes(c.key);
    if (address.ok()) m.address = *address;
    m.health = static_cast<PeerHealth>(c.health.load(std::memory_order_relaxed));
    m.paths = c.paths;
    m.paths_up = c.paths_up.load(std::memory_order_relaxed);
    m.wrs_posted = c.wrs_posted.get();
    m.wrs_completed = c.wrs_completed.get();
    m.wrs_failed = c.wrs_failed.get();
    m.bytes_written = c.bytes_written.get();
    m.inflight = c.inflight.get();
    m.path_failures = c.path_failures.get();
    m.path_recoveries = c.path_recoveries.get();
    m.times_unreachable = c.times_unreachable.get();
    m.retries = c.retries.get();
    c.wr_latency.read_into(m.wr_latency);
    out.peers.push_back(std::move(m));
  }
}

}  // namespace fabric_lib::detail

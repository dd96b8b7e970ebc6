// An accepted operation as the worker sees it: its WRs, grouped by domain, and its progress.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "base/clock.h"
#include "core/mr_registry.h"
#include "core/peer_group_data.h"
#include "core/shard_planner.h"
#include "fabric_lib/completion.h"
#include "fabric_lib/memory.h"
#include "transport/domain.h"

namespace fabric_lib::detail {

struct PeerEntry;

enum class RequestKind : uint8_t { kWrite, kSend };

struct Request {
  uint64_t id = 0;  // its TransferId (RequestPool::make_id)
  // Its place in the RequestPool's slab (fixed), and how many times it was taken from there.
  uint32_t slot = 0;
  std::atomic<uint32_t> generation{0};
  // The id it is live under in its group's worker (set as the worker accepts it, 0 from when the
  // worker gives it back): whether a TransferId still names this request. Atomic only because
  // another group's worker may look at a slot it does not own (a forged or stale id); it reads
  // the rest of the request only after its own id matched.
  std::atomic<uint64_t> live_id{0};
  // The worker's list of its live requests (shutdown, take-over): worker thread only.
  Request* live_prev = nullptr;
  Request* live_next = nullptr;
  RequestKind kind = RequestKind::kWrite;
  Completion completion;

  // kWrite: source region (null for imm-only), destinations, imm, and the plan.
  std::shared_ptr<MrEntry> src;
  std::vector<MrDesc> targets;                  // destinations, indexed by WrPlan::target
  std::shared_ptr<const PeerGroup::Data> group;  // pre-resolved destinations instead of `targets`
  std::vector<PeerEntry*> target_peers;         // the peer of each target (set by the worker)
  bool has_imm = false;
  // The arrivals of `imm` each of its WRs announces (WriteWr::imm_count): 1, or a write planned
  // as one WR for its shards (planner::plan_write_as_one) their count.
  uint16_t imm_count = 1;
  uint32_t imm = 0;
  std::vector<planner::WrPlan> wrs;             // sorted by domain
  // wrs of domain d: [domain_begin[d], domain_begin[d+1]) when grouped_by_domain(); otherwise
  // empty: every WR on wrs[0].domain (most single writes skip grouping).
  std::vector<uint32_t> domain_begin;
  // A paged write keeps its page list instead of a WrPlan per page: WR i is page i (plan_at),
  // and each PageRun [begin, end) of the list goes on its domain (at most one run per domain).
  bool paged = false;
  std::vector<uint32_t> src_pages;
  std::vector<uint32_t> dst_pages;
  planner::PageGeometry geometry;
  uint32_t largest_src_page = 0;  // of src_pages / dst_pages (found when the request was checked)
  uint32_t largest_dst_page = 0;
  std::vector<planner::PageRun> page_runs;

  // kSend: a copy of the message, or (src set) `send_length` bytes at `send_offset` of the
  // registered source region, sent from where they are.
  std::vector<uint8_t> message;
  uint64_t send_offset = 0;
  uint64_t send_length = 0;
  DomainAddress send_to;
  int send_slot = -1;

  // The submit call it came from (fabric_lib/metrics.h's OpType).
  uint8_t op = 0;
  // When the submit call began (monotonic_ns) when it is timed (metrics on, or submit latency
  // recorded); 0 otherwise.
  int64_t submit_ns = 0;
  bool first_posted = false;  // its first WR was handed to a domain
  // monotonic_ns by which the request must have completed; 0 = none.
  int64_t deadline_ns = 0;

  // Progress (worker thread only).
  uint32_t unposted = 0;  // WRs not yet handed to a domain
  uint32_t inflight = 0;  // WRs posted and not yet completed
  bool failed = false;
  bool delivered = false;
  Status error;

  // WR i of a write request (of a paged one too); its domain is the stream's, not the plan's.
  planner::WrPlan plan_at(uint32_t i) const {
    if (!paged) return wrs[i];
    return {0, 0, geometry.src_offset + uint64_t{src_pages[i]} * geometry.src_stride,
            geometry.dst_offset + uint64_t{dst_pages[i]} * geometry.dst_stride, geometry.page_length};
  }
  uint32_t target_at(uint32_t i) const { return paged ? 0 : wrs[i].target; }
  // Whether EngineCore::enqueue must group its WRs by domain (group_by_domain): a write without
  // a page list whose WRs lie on more than one domain (or that has none). A write whose WRs share
  // one domain — one WR, a pinned write, the shards of a write on a one-medium group — goes as one
  // stream on wrs[0].domain, ungrouped. The one place that decides.
  bool needs_grouping() const {
    if (kind != RequestKind::kWrite || paged || wrs.size() == 1) return false;
    if (wrs.empty()) return true;
    for (size_t i = 1; i < wrs.size(); ++i) {
      if (wrs[i].domain != wrs[0].domain) return true;
    }
    return false;
  }
  // Whether its WRs go out by domain_begin (the worker's accept reads the groups), or all as one
  // stream on wrs[0].domain (a write, ungrouped) or by page_runs (a paged write).
  bool grouped_by_domain() const { return !domain_begin.empty(); }
  // How many WRs it has.
  uint32_t num_wrs() const { return static_cast<uint32_t>(paged ? src_pages.size() : wrs.size()); }
  const MrDesc& target_desc(uint32_t t) const;
  size_t num_targets() const;
  // Back to the initial state, keeping the vectors' capacity (RequestPool); slot, generation
  // and live_id stay.
  void reset();
  // Gives the vectors' memory back (an idle request beyond RequestPool::kMaxFree).
  void drop_capacity();
  void fail(Status why) {
    if (!failed) error = std::move(why);
    failed = true;
  }
};

// Orders `wrs` by domain (stable, a counting sort: no allocation once warm) and fills domain_begin
// for `domains` domains.
void group_by_domain(Request& request, size_t domains);
// Orders a scatter's WRs by target (stable, a counting sort over `targets` entries: no allocation
// once warm) when some target's WRs are not already together — as when the targets take turns
// among a few peers (MoE dispatch): WRs to one destination with one length then go out as runs
// (one record, one provider call: GroupWorker::post_run) instead of one by one. A scatter promises
// no order among its WRs; each target's own WRs keep theirs. Before group_by_domain (stable too).
void group_by_target(Request& request, size_t targets);

}  // namespace fabric_lib::detail

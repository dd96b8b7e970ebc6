#include "core/request.h"

#include <algorithm>

#include "core/peer_group_data.h"

namespace fabric_lib::detail {

const MrDesc& Request::target_desc(uint32_t t) const { return group ? group->descs[t] : targets[t]; }
size_t Request::num_targets() const { return group ? group->descs.size() : targets.size(); }

void Request::reset() {
  id = 0;
  kind = RequestKind::kWrite;
  completion = Completion();
  src.reset();
  targets.clear();
  group.reset();
  target_peers.clear();
  has_imm = false;
  imm_count = 1;
  imm = 0;
  wrs.clear();
  domain_begin.clear();
  paged = false;
  src_pages.clear();
  dst_pages.clear();
  geometry = {};
  largest_src_page = 0;
  largest_dst_page = 0;
  page_runs.clear();
  message.clear();
  send_offset = 0;
  send_length = 0;
  send_to = DomainAddress();
  send_slot = -1;
  op = 0;
  submit_ns = 0;
  first_posted = false;
  deadline_ns = 0;
  unposted = 0;
  inflight = 0;
  failed = false;
  delivered = false;
  error = Status();
}

void Request::drop_capacity() {
  std::vector<MrDesc>().swap(targets);
  std::vector<PeerEntry*>().swap(target_peers);
  std::vector<planner::WrPlan>().swap(wrs);
  std::vector<uint32_t>().swap(domain_begin);
  std::vector<uint32_t>().swap(src_pages);
  std::vector<uint32_t>().swap(dst_pages);
  std::vector<planner::PageRun>().swap(page_runs);
  std::vector<uint8_t>().swap(message);
}

void group_by_domain(Request& request, size_t domains) {
  std::vector<planner::WrPlan>& wrs = request.wrs;
  std::vector<uint32_t>& begin = request.domain_begin;
  begin.assign(domains + 1, 0);
  bool sorted = true;
  for (size_t i = 0; i < wrs.size(); ++i) {
    ++begin[wrs[i].domain + 1];
    sorted = sorted && (i == 0 || wrs[i - 1].domain <= wrs[i].domain);
  }
  for (size_t d = 0; d < domains; ++d) begin[d + 1] += begin[d];
  if (sorted) return;  // the common case: planned domain by domain already
  thread_local std::vector<planner::WrPlan> scratch;
  scratch.resize(wrs.size());
  thread_local std::vector<uint32_t> next;
  next.assign(begin.begin(), begin.end() - 1);
  for (const planner::WrPlan& w : wrs) scratch[next[w.domain]++] = w;
  wrs.swap(scratch);
}

void group_by_target(Request& request, size_t targets) {
  std::vector<planner::WrPlan>& wrs = request.wrs;
  // The counting array is as long as the targets: not worth it for a few WRs among many targets
  // (a scatter to some members of a large PeerGroup).
  if (wrs.size() < 3 || targets < 2 || targets > 2 * wrs.size() + 64) return;
  // Without a group, each entry of `targets` is a descriptor's first WR: as many as WRs, none repeats.
  if (!request.group && targets >= wrs.size()) return;
  thread_local std::vector<uint32_t> next;
  next.assign(targets + 1, 0);
  bool together = true;  // each target's WRs already one after another
  for (size_t i = 0; i < wrs.size(); ++i) {
    const uint32_t t = wrs[i].target;
    together = together && (next[t + 1] == 0 || wrs[i - 1].target == t);
    ++next[t + 1];
  }
  if (together) return;
  for (size_t t = 0; t < targets; ++t) next[t + 1] += next[t];
  thread_local std::vector<planner::WrPlan> scratch;
  scratch.resize(wrs.size());
  for (const planner::WrPlan& w : wrs) scratch[next[w.target]++] = w;
  wrs.swap(scratch);
}

}  // namespace fabric_lib::detail

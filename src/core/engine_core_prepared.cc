// EngineCore: prepared requests (fabric_lib/prepared.h). Prepare checks what never changes and
// resolves the peers once; a submit checks only the bounds of what it names, then plans and queues
// an ordinary request.
#include <algorithm>

#include "base/largest_index.h"
#include "core/engine_core.h"
#include "core/range_checks.h"

namespace fabric_lib::detail {

Result<std::shared_ptr<const PreparedPagedWrites::Data>> EngineCore::prepare_paged_writes(const PagedWriteTemplate& t) {
  if (!gate_.accepting()) return fabric_lib::stopped("engine stopped");
  if (t.src_page_bound == 0 || t.dst_page_bound == 0) {
    return invalid_argument("prepare_paged_writes: page bounds must be >= 1");
  }
  FABRIC_LIB_RETURN_IF_ERROR(check_page_geometry(t.page_length, t.src_stride, t.dst_stride,
                                                 t.src_page_bound > 1 || t.dst_page_bound > 1, "prepare_paged_writes"));
  std::shared_ptr<MrEntry> src = registry_.find(t.src);
  if (!src) return not_found("source memory region " + std::to_string(t.src.id) + " is not registered");
  FABRIC_LIB_RETURN_IF_ERROR(check_remote(t.dst, 0, 0, src->group));
  FABRIC_LIB_RETURN_IF_ERROR(check_route(t.route));
  if (!pages_fit(t.src_offset, t.src_page_bound - 1, t.src_stride, t.page_length, src->length)) {
    return out_of_range("prepare_paged_writes: source page " + std::to_string(t.src_page_bound - 1) + " ends past the " +
                        std::to_string(src->length) + "-byte source region");
  }
  if (!pages_fit(t.dst_offset, t.dst_page_bound - 1, t.dst_stride, t.page_length, t.dst.length())) {
    return out_of_range("prepare_paged_writes: destination page " + std::to_string(t.dst_page_bound - 1) +
                        " ends past the " + std::to_string(t.dst.length()) + "-byte destination region");
  }
  Result<std::shared_ptr<const PeerGroup::Data>> dst = resolve_peers(std::span<const MrDesc>(&t.dst, 1), src->group);
  if (!dst.ok()) return dst.status();
  auto data = std::make_shared<PreparedPagedWrites::Data>();
  data->engine = this;
  data->src = std::move(src);
  data->dst = std::move(dst).value();
  data->t = t;
  return std::shared_ptr<const PreparedPagedWrites::Data>(std::move(data));
}

Result<TransferId> EngineCore::submit_prepared(const PreparedPagedWrites::Data& p, std::span<const uint32_t> src_pages,
                                               std::span<const uint32_t> dst_pages, std::optional<uint32_t> imm,
                                               Completion done) {
  SubmitScope scope(*this, OpType::kPagedWrite);
  if (!scope.accepting()) return fabric_lib::stopped("engine stopped");
  if (p.engine != this) return invalid_argument("submit_prepared: the prepared request belongs to another engine");
  if (p.src->unregistered.load(std::memory_order_acquire)) {
    return not_found("submit_prepared: the source region was unregistered");
  }
  const size_t pages = src_pages.size();
  if (pages == 0) return invalid_argument("submit_prepared: no pages");
  if (dst_pages.size() != pages) {
    return invalid_argument("submit_prepared: " + std::to_string(pages) + " source pages but " +
                            std::to_string(dst_pages.size()) + " destination pages");
  }
  if (pages > UINT32_MAX) return invalid_argument("submit_prepared: too many pages");
  // The largest indices first (in lanes: base/largest_index.h); the first page out of bounds is
  // looked for only to name it.
  const uint32_t max_src = largest_index(src_pages);
  const uint32_t max_dst = largest_index(dst_pages);
  const bool in_bounds = max_src < p.t.src_page_bound && max_dst < p.t.dst_page_bound;
  for (size_t i = 0; !in_bounds && i < pages; ++i) {
    if (src_pages[i] >= p.t.src_page_bound || dst_pages[i] >= p.t.dst_page_bound) {
      return out_of_range("submit_prepared: page " + std::to_string(i) + " (" + std::to_string(src_pages[i]) + " -> " +
                          std::to_string(dst_pages[i]) + ") is outside the prepared bounds (" +
                          std::to_string(p.t.src_page_bound) + ", " + std::to_string(p.t.dst_page_bound) + ")");
    }
  }
  const size_t group = p.src->group;
  RequestPool::Ptr r = take_request(std::move(done), p.src, imm);
  if (!r) return RequestPool::too_many_requests();
  r->paged = true;
  r->src_pages.assign(src_pages.begin(), src_pages.end());
  r->dst_pages.assign(dst_pages.begin(), dst_pages.end());
  r->geometry = {p.t.page_length, p.t.src_stride, p.t.dst_stride, p.t.src_offset, p.t.dst_offset};
  r->largest_src_page = max_src;
  r->largest_dst_page = max_dst;
  const RequestPlacement where = place(p.t.route, group);
  planner::plan_pages(pages, paged_route(p.t.route, where.placement), num_domains(), where.start, r->page_runs);
  r->group = p.dst;
  return enqueue(group, std::move(r), scope);
}

Result<std::shared_ptr<const PreparedScatter::Data>> EngineCore::prepare_scatter(
    const ScatterTemplate& t, std::shared_ptr<const PeerGroup::Data> peers) {
  if (!gate_.accepting()) return fabric_lib::stopped("engine stopped");
  if (!peers) return invalid_argument("prepare_scatter: a PeerGroup is required (add_peer_group)");
  if (t.targets.empty()) return invalid_argument("prepare_scatter: no targets");
  if (t.targets.size() > UINT32_MAX) return invalid_argument("prepare_scatter: too many targets");
  std::shared_ptr<MrEntry> src = registry_.find(t.src);
  if (!src) return not_found("source memory region " + std::to_string(t.src.id) + " is not registered");
  if (peers->engine != this) return invalid_argument("prepare_scatter: the peer group belongs to another engine");
  if (peers->group != src->group) return invalid_argument("prepare_scatter: peer group belongs to another group");
  FABRIC_LIB_RETURN_IF_ERROR(check_route(t.route));
  for (size_t i = 0; i < t.targets.size(); ++i) {
    const PreparedScatterTarget& target = t.targets[i];
    const std::string where = "prepare_scatter: target " + std::to_string(i) + ": ";
    if (target.peer >= peers->descs.size()) {
      return invalid_argument(where + "peer " + std::to_string(target.peer) + " is not in the group of " +
                              std::to_string(peers->descs.size()));
    }
    if (!fits(target.src_offset, target.src_window, src->length)) {
      return out_of_range(where + "source window " + range_text(target.src_offset, target.src_window, src->length));
    }
    Status s = check_remote(peers->descs[target.peer], target.dst_offset, target.dst_window, src->group);
    if (!s.ok()) return Status(s.code(), where + s.message());
  }
  auto data = std::make_shared<PreparedScatter::Data>();
  data->engine = this;
  data->src = std::move(src);
  data->peers = std::move(peers);
  data->targets = t.targets;
  data->sharding = t.sharding;
  data->route = t.route;
  return std::shared_ptr<const PreparedScatter::Data>(std::move(data));
}

Result<TransferId> EngineCore::submit_prepared(const PreparedScatter::Data& p, std::span<const ScatterSlice> slices,
                                               std::optional<uint32_t> imm, Completion done) {
  SubmitScope scope(*this, OpType::kScatter);
  if (!scope.accepting()) return fabric_lib::stopped("engine stopped");
  if (p.engine != this) return invalid_argument("submit_prepared: the prepared scatter belongs to another engine");
  if (p.src->unregistered.load(std::memory_order_acquire)) {
    return not_found("submit_prepared: the source region was unregistered");
  }
  if (slices.size() != p.targets.size()) {
    return invalid_argument("submit_prepared: " + std::to_string(slices.size()) + " slices for " +
                            std::to_string(p.targets.size()) + " prepared targets");
  }
  // Every slice is checked before the request is taken; then each is planned straight into it.
  bool any = false;
  for (size_t i = 0; i < slices.size(); ++i) {
    const ScatterSlice& s = slices[i];
    const PreparedScatterTarget& t = p.targets[i];
    if (!fits(s.offset_in_src, s.length, t.src_window) || !fits(s.offset_in_dst, s.length, t.dst_window)) {
      return out_of_range("submit_prepared: slice " + std::to_string(i) + " ([" + std::to_string(s.offset_in_src) +
                          ", +" + std::to_string(s.length) + ") -> [" + std::to_string(s.offset_in_dst) +
                          ", ...)) leaves its prepared windows (" + std::to_string(t.src_window) + ", " +
                          std::to_string(t.dst_window) + " bytes)");
    }
    any = any || s.length > 0 || imm.has_value();
  }
  if (!any) return invalid_argument("submit_prepared: every slice is empty and there is no imm");
  const size_t group = p.src->group;
  RequestPool::Ptr r = take_request(std::move(done), p.src, imm);
  if (!r) return RequestPool::too_many_requests();
  const RequestPlacement where = place(p.route, group);
  planner::ScatterPlanner planner(p.sharding, p.route, num_domains(), where.start, where.placement);
  for (size_t i = 0; i < slices.size(); ++i) {
    const ScatterSlice& s = slices[i];
    if (s.length == 0 && !imm) {  // nothing to write and no imm to deliver
      planner.pass();
      continue;
    }
    const PreparedScatterTarget& t = p.targets[i];
    planner.add({static_cast<uint32_t>(i), s.length, t.src_offset + s.offset_in_src, t.dst_offset + s.offset_in_dst},
                r->wrs);
  }
  for (planner::WrPlan& w : r->wrs) w.target = p.targets[w.target].peer;  // WRs name the group's peers
  r->group = p.peers;
  return enqueue(group, std::move(r), scope);
}

}  // namespace fabric_lib::detail

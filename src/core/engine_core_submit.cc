// EngineCore: the request forms — imm, write, paged writes, scatter, barrier, peer groups — and
// the checks they share: each validates what it names against the registered regions and the
// group's transport, plans its WRs (or keeps a paged write's page lists) and queues the request
// on its group's worker.

#include <array>
#include <type_traits>
#include <utility>

#include "base/identity_slot.h"
#include "base/largest_index.h"
#include "base/mr_desc_fields.h"
#include "core/engine_core.h"
#include "core/peer_group_data.h"
#include "core/range_checks.h"

namespace fabric_lib::detail {

Status EngineCore::check_remote(const MrDesc& desc, uint64_t offset, uint64_t length, size_t group) const {
  const MrDescFields::Data* d = MrDescFields::of(desc);  // read inline: this runs per scatter target
  if (!d) return invalid_argument("empty destination descriptor");
  if (d->transport != workers_[group]->infos()[0].transport) {
    return invalid_argument("destination descriptor is of another transport");
  }
  if (d->domains.size() != num_domains()) {
    return invalid_argument("destination descriptor comes from a group of " + std::to_string(d->domains.size()) +
                            " domains; this engine has " + std::to_string(num_domains()) + " per group");
  }
  if (!has_access(d->access, Access::kRemoteWrite)) {
    return invalid_argument("destination region is not registered for remote writes");
  }
  if (!fits(offset, length, d->length)) {
    return out_of_range("destination range " + range_text(offset, length, d->length));
  }
  return ok_status();
}

Status EngineCore::check_page_geometry(uint64_t page_length, uint64_t src_stride, uint64_t dst_stride,
                                       bool several_pages, const char* what) const {
  if (page_length == 0 || page_length > kMaxWrBytes) {
    return invalid_argument(std::string(what) + ": page_length must be 1.." + std::to_string(kMaxWrBytes));
  }
  if (several_pages && (src_stride < page_length || dst_stride < page_length)) {
    return invalid_argument(std::string(what) + ": strides must be >= page_length");
  }
  return ok_status();
}

Status EngineCore::check_route(const Route& route) const {
  if (const Pinned* p = std::get_if<Pinned>(&route); p && p->domain >= num_domains()) {
    return invalid_argument("route pins domain " + std::to_string(p->domain) + " of " +
                            std::to_string(num_domains()));
  }
  return ok_status();
}

EngineCore::RequestPlacement EngineCore::place(const Route& route, size_t group) {
  const RoundRobin* rr = std::get_if<RoundRobin>(&route);
  const transport::DomainInfo& info = workers_[group]->infos()[0];
  if (rr && rr->max_shards == 0 && info.one_medium) {
    return {planner::Placement::kFirstDomain, options_.one_medium_spread ? workers_[group]->next_start_domain() : 0,
            info.takes_imm_count};
  }
  return {planner::Placement::kRotate, workers_[group]->next_start_domain()};
}

Route EngineCore::paged_route(const Route& route, planner::Placement placement) {
  return placement == planner::Placement::kFirstDomain ? Route{RoundRobin{1}} : route;
}

// --- submission -------------------------------------------------------------------------------

RequestPool::Ptr EngineCore::take_request(Completion&& done, std::shared_ptr<MrEntry> src, std::optional<uint32_t> imm) {
  RequestPool::Ptr r = requests_->take();
  if (!r) return r;
  r->completion = std::move(done);
  r->src = std::move(src);
  r->has_imm = imm.has_value();
  r->imm = imm.value_or(0);
  return r;
}

TransferId EngineCore::enqueue(size_t group, RequestPool::Ptr request, const SubmitScope& scope) {
  // The low bits name the group, so cancel() finds the worker that owns the request; the slot and
  // generation let that worker find it (RequestPool).
  const TransferId id = RequestPool::make_id(request->generation.load(std::memory_order_relaxed), request->slot, group);
  request->id = id;
  request->op = static_cast<uint8_t>(scope.op());
  request->submit_ns = scope.start_ns();
  if (request->completion.has_deadline()) {
    request->deadline_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                               request->completion.deadline().time_since_epoch())
                               .count();
  } else if (options_.default_timeout.count() > 0) {
    request->deadline_ns = monotonic_ns() + options_.default_timeout.count();
  }
  if (scope.op() == OpType::kScatter) group_by_target(*request, request->num_targets());
  if (request->needs_grouping()) group_by_domain(*request, num_domains());
  scope.count_submitted();
  workers_[group]->submit(request.release());
  return id;
}

Result<TransferId> EngineCore::submit_imm(uint32_t imm, const MrDesc& dst, Completion done, size_t group) {
  SubmitScope scope(*this, OpType::kImm);
  if (!scope.accepting()) return fabric_lib::stopped("engine stopped");
  FABRIC_LIB_RETURN_IF_ERROR(check_group(group));
  FABRIC_LIB_RETURN_IF_ERROR(check_remote(dst, 0, 0, group));
  RequestPool::Ptr r = take_request(std::move(done), nullptr, imm);
  if (!r) return RequestPool::too_many_requests();
  r->targets.push_back(dst);
  planner::plan_imm_only(1, num_domains(), workers_[group]->next_start_domain(), r->wrs);
  return enqueue(group, std::move(r), scope);
}

Result<TransferId> EngineCore::submit_write(WriteRequest&& request, Completion&& done) {
  SubmitScope scope(*this, OpType::kWrite);
  if (!scope.accepting()) return fabric_lib::stopped("engine stopped");
  if (request.length == 0 && !request.imm) return invalid_argument("submit_write: zero length without an imm");
  Result<std::shared_ptr<MrEntry>> src = local_region(request.src, request.src_offset, request.length);
  if (!src.ok()) return src.status();
  const size_t group = (*src)->group;
  FABRIC_LIB_RETURN_IF_ERROR(check_remote(request.dst, request.dst_offset, request.length, group));
  FABRIC_LIB_RETURN_IF_ERROR(check_route(request.route));
  RequestPool::Ptr r = take_request(std::move(done), std::move(src).value(), request.imm);
  if (!r) return RequestPool::too_many_requests();
  const RequestPlacement where = place(request.route, group);
  if (where.write_as_one_wr && request.length <= kMaxWrBytes) {
    planner::plan_write_as_one(request, where.start, r->wrs);
    // The arrivals the target expects, by the function it computes them with: one per shard.
    static_assert(kMaxDomainsPerGroup <= UINT16_MAX, "a write's shards (<= its domains) fit WriteWr::imm_count");
    if (request.imm) r->imm_count = static_cast<uint16_t>(imm_count_of_write(request.length, request.route, num_domains()));
  } else {
    planner::plan_write(request, num_domains(), where.start, r->wrs, where.placement);
  }
  r->targets.push_back(std::move(request.dst));  // not `= {...}`: that copies the descriptor (a reference count up and down)
  return enqueue(group, std::move(r), scope);
}

namespace {
// True when a submit may take the caller's request apart (it passed an rvalue).
template <class CallerRequest>
constexpr bool takes_request = !std::is_const_v<std::remove_reference_t<CallerRequest>>;

// A scatter's targets that name one descriptor (a peer's buffer at several offsets, as MoE
// dispatch names them) are checked once but for their ranges, and share one entry of the
// request's `targets`: one reference held, one peer lookup, and their WRs may go out as runs.
// Descriptors are told apart by MrDesc::identity (shared by copies). A small open-addressed table
// finds repeats (linear probing from identity_slot(); a direct-mapped table of 16
// slots collided eight descriptors into 22 entries in engine-overhead-bench, and their WRs took
// turns); it has at least two slots per target, up to 128, and only those are cleared per submit. A
// descriptor that finds no free slot within kProbes goes without one: a second check or entry.
// Filled by the checks, then read for the entries, it needs no per-target scratch.
class DescTable {
 public:
  struct Slot {
    const void* identity;
    uint32_t entry;   // its index in the request's targets
    uint64_t length;  // its region's length
  };
  static constexpr uint32_t kNoEntry = UINT32_MAX;  // checked, not yet an entry of the request
  // For `targets` targets; 0: a scatter through a PeerGroup, which uses no table.
  explicit DescTable(size_t targets)
      : bits_(targets == 0 ? 0 : targets <= 8 ? 4 : targets <= 16 ? 5 : targets <= 32 ? 6 : 7) {
    if (bits_ > 0) {
      for (size_t i = 0; i < (size_t{1} << bits_); ++i) slots_[i].identity = nullptr;
    }
  }
  // The slot holding `identity`, or a free one to fill for it (identity null), or null when
  // none is near.
  Slot* find(const void* identity) {
    const size_t mask = (size_t{1} << bits_) - 1;
    size_t i = identity_slot(identity, bits_);
    for (unsigned probe = 0; probe < kProbes; ++probe, i = (i + 1) & mask) {
      if (slots_[i].identity == identity || slots_[i].identity == nullptr) return &slots_[i];
    }
    return nullptr;
  }

 private:
  static constexpr unsigned kProbes = 8;
  unsigned bits_;
  std::array<Slot, 128> slots_;  // the first 2^bits_ in use; not zeroed as a whole
};
}  // namespace

Result<TransferId> EngineCore::submit_paged_writes(const PagedWriteRequest& request, Completion done) {
  return submit_paged_writes_of(request, std::move(done));
}
Result<TransferId> EngineCore::submit_paged_writes(PagedWriteRequest&& request, Completion done) {
  return submit_paged_writes_of(std::move(request), std::move(done));
}

template <class CallerRequest>
Result<TransferId> EngineCore::submit_paged_writes_of(CallerRequest&& request, Completion done) {
  SubmitScope scope(*this, OpType::kPagedWrite);
  if (!scope.accepting()) return fabric_lib::stopped("engine stopped");
  const size_t pages = request.src_pages.size();
  if (pages == 0) return invalid_argument("submit_paged_writes: no pages");
  if (request.dst_pages.size() != pages) {
    return invalid_argument("submit_paged_writes: " + std::to_string(pages) + " source pages but " +
                            std::to_string(request.dst_pages.size()) + " destination pages");
  }
  if (pages > UINT32_MAX) return invalid_argument("submit_paged_writes: too many pages");
  FABRIC_LIB_RETURN_IF_ERROR(check_page_geometry(request.page_length, request.src_stride, request.dst_stride,
                                                 pages > 1, "submit_paged_writes"));
  std::shared_ptr<MrEntry> src = registry_.find(request.src);
  if (!src) return not_found("source memory region " + std::to_string(request.src.id) + " is not registered");
  const size_t group = src->group;
  FABRIC_LIB_RETURN_IF_ERROR(check_remote(request.dst, 0, 0, group));
  FABRIC_LIB_RETURN_IF_ERROR(check_route(request.route));
  const uint32_t max_src = largest_index(request.src_pages);
  const uint32_t max_dst = largest_index(request.dst_pages);
  if (!pages_fit(request.src_offset, max_src, request.src_stride, request.page_length, src->length)) {
    return out_of_range("source page " + std::to_string(max_src) + " ends past the " + std::to_string(src->length) +
                        "-byte source region");
  }
  if (!pages_fit(request.dst_offset, max_dst, request.dst_stride, request.page_length, request.dst.length())) {
    return out_of_range("destination page " + std::to_string(max_dst) + " ends past the " +
                        std::to_string(request.dst.length()) + "-byte destination region");
  }
  RequestPool::Ptr r = take_request(std::move(done), std::move(src), request.imm);
  if (!r) return RequestPool::too_many_requests();
  // The page list itself, not a WrPlan per page (Request::paged). Taken: the request's own vectors,
  // swapped in (a 4096-page write's two lists are not copied; the recycled request's old
  // buffers leave with `request`). Kept by the caller: copied into the recycled request's buffers.
  r->paged = true;
  if constexpr (takes_request<CallerRequest>) {
    r->src_pages.swap(request.src_pages);
    r->dst_pages.swap(request.dst_pages);
  } else {
    r->src_pages.assign(request.src_pages.begin(), request.src_pages.end());
    r->dst_pages.assign(request.dst_pages.begin(), request.dst_pages.end());
  }
  r->geometry = {request.page_length, request.src_stride, request.dst_stride, request.src_offset, request.dst_offset};
  r->largest_src_page = max_src;
  r->largest_dst_page = max_dst;
  const RequestPlacement where = place(request.route, group);
  planner::plan_pages(pages, paged_route(request.route, where.placement), num_domains(), where.start, r->page_runs);
  r->targets.push_back(std::forward<CallerRequest>(request).dst);
  return enqueue(group, std::move(r), scope);
}

Result<TransferId> EngineCore::submit_scatter(const ScatterRequest& request,
                                              std::shared_ptr<const PeerGroup::Data> peers, Completion done) {
  SubmitScope scope(*this, OpType::kScatter);
  if (!scope.accepting()) return fabric_lib::stopped("engine stopped");
  if (request.targets.empty()) return invalid_argument("submit_scatter: no targets");
  if (request.targets.size() > UINT32_MAX) return invalid_argument("submit_scatter: too many targets");
  std::shared_ptr<MrEntry> src = registry_.find(request.src);
  if (!src) return not_found("source memory region " + std::to_string(request.src.id) + " is not registered");
  const size_t group = src->group;
  FABRIC_LIB_RETURN_IF_ERROR(check_route(request.route));
  if (peers && peers->engine != this) return invalid_argument("submit_scatter: the peer group belongs to another engine");
  if (peers && peers->group != group) return invalid_argument("submit_scatter: peer group belongs to another group");
  DescTable descs(peers ? 0 : request.targets.size());  // without a group: the descriptors checked so far
  for (size_t t = 0; t < request.targets.size(); ++t) {
    const ScatterTarget& target = request.targets[t];
    // Built only for an error: building it for every target showed in perf of a 64-target submit.
    auto where = [t] { return "scatter target " + std::to_string(t) + ": "; };
    if (target.length == 0 && !request.imm) return invalid_argument(where() + "zero length without an imm");
    if (!fits(target.src_offset, target.length, src->length)) {
      return out_of_range(where() + "source range " + range_text(target.src_offset, target.length, src->length));
    }
    if (peers && target.peer >= peers->descs.size()) {
      return invalid_argument(where() + "peer " + std::to_string(target.peer) + " is not in the group of " +
                              std::to_string(peers->descs.size()));
    }
    if (peers) {  // the member was checked when the group was made: only the range is left
      const uint64_t length = peers->lengths[target.peer];
      if (!fits(target.dst_offset, target.length, length)) {
        return out_of_range(where() + "destination range " + range_text(target.dst_offset, target.length, length));
      }
      continue;
    }
    if (target.dst.empty()) return invalid_argument(where() + "empty destination descriptor");
    const void* identity = target.dst.identity();
    DescTable::Slot* seen = descs.find(identity);
    if (seen && seen->identity == identity) {
      if (!fits(target.dst_offset, target.length, seen->length)) {
        return out_of_range(where() + "destination range " + range_text(target.dst_offset, target.length, seen->length));
      }
      continue;
    }
    Status s = check_remote(target.dst, target.dst_offset, target.length, group);
    if (!s.ok()) return Status(s.code(), where() + s.message());
    if (seen) *seen = {identity, DescTable::kNoEntry, MrDescFields::of(target.dst)->length};  // checked: not empty
  }
  RequestPool::Ptr r = take_request(std::move(done), std::move(src), request.imm);
  if (!r) return RequestPool::too_many_requests();
  const RequestPlacement where = place(request.route, group);
  planner::plan_scatter(request, num_domains(), where.start, r->wrs, where.placement);
  if (peers) {
    // Group targets name peers by index; map each WR's target to that peer.
    for (planner::WrPlan& w : r->wrs) w.target = request.targets[w.target].peer;
    r->group = std::move(peers);
  } else {
    // A target's WRs are planned one after another: the one before's entry serves the rest.
    uint32_t last_target = UINT32_MAX, last_entry = 0;
    for (planner::WrPlan& w : r->wrs) {
      if (w.target == last_target) {
        w.target = last_entry;
        continue;
      }
      last_target = w.target;
      const MrDesc& desc = request.targets[w.target].dst;
      const void* identity = desc.identity();
      DescTable::Slot* slot = descs.find(identity);  // the checks' slot (or none, as then)
      if (slot && slot->identity == identity && slot->entry != DescTable::kNoEntry) {
        w.target = last_entry = slot->entry;
        continue;
      }
      w.target = last_entry = static_cast<uint32_t>(r->targets.size());
      r->targets.push_back(desc);
      if (slot && slot->identity == identity) slot->entry = w.target;
    }
  }
  return enqueue(group, std::move(r), scope);
}

Result<TransferId> EngineCore::submit_barrier(uint32_t imm, std::span<const MrDesc> peers, Completion done,
                                              size_t group) {
  SubmitScope scope(*this, OpType::kBarrier);
  if (!scope.accepting()) return fabric_lib::stopped("engine stopped");
  FABRIC_LIB_RETURN_IF_ERROR(check_group(group));
  if (peers.empty()) return invalid_argument("submit_barrier: no peers");
  for (size_t i = 0; i < peers.size(); ++i) {
    Status s = check_remote(peers[i], 0, 0, group);
    if (!s.ok()) return Status(s.code(), "barrier peer " + std::to_string(i) + ": " + s.message());
  }
  RequestPool::Ptr r = take_request(std::move(done), nullptr, imm);
  if (!r) return RequestPool::too_many_requests();
  r->targets.assign(peers.begin(), peers.end());
  planner::plan_imm_only(peers.size(), num_domains(), workers_[group]->next_start_domain(), r->wrs);
  return enqueue(group, std::move(r), scope);
}

Result<std::shared_ptr<const PeerGroup::Data>> EngineCore::add_peer_group(std::span<const MrDesc> peers, size_t group) {
  if (!gate_.accepting()) return fabric_lib::stopped("engine stopped");
  FABRIC_LIB_RETURN_IF_ERROR(check_group(group));
  if (peers.empty()) return invalid_argument("add_peer_group: no peers");
  for (size_t i = 0; i < peers.size(); ++i) {
    Status s = check_remote(peers[i], 0, 0, group);
    if (!s.ok()) return Status(s.code(), "peer " + std::to_string(i) + ": " + s.message());
  }
  return resolve_peers(peers, group);
}

Result<std::shared_ptr<const PeerGroup::Data>> EngineCore::resolve_peers(std::span<const MrDesc> descs, size_t group) {
  auto data = std::make_shared<PeerGroup::Data>();
  data->engine = this;
  data->group = group;
  data->descs.assign(descs.begin(), descs.end());
  for (const MrDesc& desc : data->descs) data->lengths.push_back(desc.length());
  Status status = workers_[group]->run_sync([&](GroupWorker& w) {
    for (const MrDesc& desc : data->descs) {
      PeerEntry& peer = w.peer_for(desc);
      FABRIC_LIB_RETURN_IF_ERROR(w.resolve_all_paths(peer));
      data->peers.push_back(&peer);
    }
    return ok_status();
  });
  if (!status.ok()) return status;
  return std::shared_ptr<const PeerGroup::Data>(std::move(data));
}

}  // namespace fabric_lib::detail

#include "core/shard_planner.h"

#include <algorithm>

#include "fabric_lib/prepared.h"

namespace fabric_lib::planner {
namespace {
uint64_t div_up(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }
}  // namespace

// length > 0. At most length / kMinShardBytes shards (so each but the last has at least
// kMinShardBytes), of one aligned size. A size within kShardAlignBytes of 2^64 would wrap when
// rounded up: it is one shard of `length` then, as its rounded size (2^64) would be.
ShardLayout shard_layout(uint64_t length, const Route& route, size_t domains) {
  static_assert((kShardAlignBytes & (kShardAlignBytes - 1)) == 0, "rounded up with a mask");
  uint64_t shards = std::min<uint64_t>(shard_limit(route, domains), length / kMinShardBytes);
  shards = std::max<uint64_t>(shards, 1);
  const uint64_t per = div_up(length, shards);
  const uint64_t aligned = per > UINT64_MAX - (kShardAlignBytes - 1) ? length : (per + kShardAlignBytes - 1) & ~(kShardAlignBytes - 1);
  const uint64_t shard_bytes = aligned >= length ? length : aligned;
  return {div_up(length, shard_bytes), shard_bytes};
}

uint64_t count_contiguous(uint64_t length, const Route& route, size_t domains) {
  if (length == 0) return 1;
  const ShardLayout l = shard_layout(length, route, domains);
  const uint64_t last = length - (l.shards - 1) * l.shard_bytes;
  return (l.shards - 1) * div_up(l.shard_bytes, kMaxWrBytes) + div_up(last, kMaxWrBytes);
}

size_t shard_limit(const Route& route, size_t domains) {
  if (domains == 0) return 1;
  if (std::holds_alternative<Pinned>(route)) return 1;
  const uint32_t max_shards = std::get<RoundRobin>(route).max_shards;
  return max_shards == 0 ? domains : std::min<size_t>(max_shards, domains);
}

uint32_t domain_of(size_t i, const Route& route, size_t domains, uint32_t start) {
  if (const Pinned* p = std::get_if<Pinned>(&route)) return p->domain;
  if (domains == 0) return 0;
  return static_cast<uint32_t>((start + i % shard_limit(route, domains)) % domains);
}

size_t plan_contiguous(uint64_t length, const Route& route, size_t domains, uint32_t start,
                       std::vector<WritePiece>& out) {
  return for_each_contiguous_piece(length, route, domains, start, [&](const WritePiece& p) { out.push_back(p); });
}

size_t plan_pages(size_t pages, const Route& route, size_t domains, uint32_t start, std::vector<PageRun>& out) {
  return for_each_page_run(pages, route, domains, start, [&](const PageRun& r) { out.push_back(r); });
}

}  // namespace fabric_lib::planner

namespace fabric_lib::planner {

void plan_write(const WriteRequest& request, size_t domains, uint32_t start, std::vector<WrPlan>& out,
                Placement placement) {
  for_each_contiguous_piece(
      request.length, request.route, domains, start,
      [&](const WritePiece& p) {
        out.push_back({p.domain, 0, request.src_offset + p.offset, request.dst_offset + p.offset, p.length});
      },
      placement);
}

void plan_write_as_one(const WriteRequest& request, uint32_t domain, std::vector<WrPlan>& out) {
  out.push_back({domain, 0, request.src_offset, request.dst_offset, request.length});
}

void plan_page_list(std::span<const uint32_t> src_pages, std::span<const uint32_t> dst_pages, const PageGeometry& g,
                    const Route& route, size_t domains, uint32_t start, std::vector<WrPlan>& out) {
  // Sized once and filled in place: the per-page loop is the paged hot path (no capacity check
  // per page).
  const size_t base = out.size();
  out.resize(base + src_pages.size());
  WrPlan* plan = out.data() + base;
  for_each_page_run(src_pages.size(), route, domains, start, [&](const PageRun& run) {
    for (uint32_t i = run.begin; i < run.end; ++i) {
      plan[i] = {run.domain, 0, g.src_offset + uint64_t{src_pages[i]} * g.src_stride,
                 g.dst_offset + uint64_t{dst_pages[i]} * g.dst_stride, g.page_length};
    }
  });
}

void plan_paged(const PagedWriteRequest& request, size_t domains, uint32_t start, std::vector<WrPlan>& out) {
  plan_page_list(request.src_pages, request.dst_pages,
                 {request.page_length, request.src_stride, request.dst_stride, request.src_offset, request.dst_offset},
                 request.route, domains, start, out);
}

void plan_scatter_piece(const ScatterPiece& target, ScatterSharding sharding, const Route& route, size_t domains,
                        uint32_t start, std::vector<WrPlan>& out, Placement placement) {
  auto emit = [&](const WritePiece& p) {
    out.push_back({p.domain, target.target, target.src_offset + p.offset, target.dst_offset + p.offset, p.length});
  };
  if (sharding == ScatterSharding::kByBytes) {
    // Destination t's first shard on (start + t) % domains, summed in 64 bits: a 32-bit sum wraps
    // once the group's start counter nears 2^32 submits, and ScatterPlanner's stepping does not.
    const uint32_t first = domains == 0 ? 0 : static_cast<uint32_t>((uint64_t{start} + target.target) % domains);
    for_each_contiguous_piece(target.length, route, domains, first, emit, placement);
  } else {
    for_each_contiguous_piece(target.length, Pinned{domain_of(target.target, route, domains, start)}, domains, 0, emit);
  }
}

DomainRotor::DomainRotor(const Route& route, size_t domains, uint32_t start, size_t limit) {
  if (const Pinned* p = std::get_if<Pinned>(&route)) {
    fixed_ = p->domain;
  } else if (domains > 0) {
    rotates_ = true;
    domains_ = domains;
    limit_ = limit;
    base_ = start % domains;
    domain_ = base_;
  }
}

ScatterPlanner::ScatterPlanner(ScatterSharding sharding, const Route& route, size_t domains, uint32_t start,
                               Placement placement)
    : sharding_(sharding),
      route_(route),
      domains_(domains),
      start_(start),
      placement_(placement),
      // kByPeer: destination t on domain_of(t, route); kByBytes: its first shard on
      // domain_of(0, route, domains, start + t), which steps over all the domains.
      rotor_(route, domains, start, sharding == ScatterSharding::kByPeer ? shard_limit(route, domains) : domains) {}

void ScatterPlanner::add(const ScatterPiece& piece, std::vector<WrPlan>& out) {
  const uint32_t domain = rotor_.next();
  // Shorter than two shards: one WR on that domain, whatever the placement (the first case of
  // for_each_contiguous_piece). Longer: plan_scatter_piece, the one rule for the rest.
  if (piece.length < 2 * kMinShardBytes) {
    out.push_back({domain, piece.target, piece.src_offset, piece.dst_offset, piece.length});
    return;
  }
  plan_scatter_piece(piece, sharding_, route_, domains_, start_, out, placement_);
}

void plan_scatter(const ScatterRequest& request, size_t domains, uint32_t start, std::vector<WrPlan>& out,
                  Placement placement) {
  ScatterPlanner planner(request.sharding, request.route, domains, start, placement);
  for (size_t t = 0; t < request.targets.size(); ++t) {
    const ScatterTarget& target = request.targets[t];
    planner.add({static_cast<uint32_t>(t), target.length, target.src_offset, target.dst_offset}, out);
  }
}

void plan_imm_only(size_t peers, size_t domains, uint32_t start, std::vector<WrPlan>& out) {
  for (size_t t = 0; t < peers; ++t) {
    out.push_back({domain_of(t, RoundRobin{}, domains, start), static_cast<uint32_t>(t), 0, 0, 0});
  }
}

}  // namespace fabric_lib::planner

// --- imm_count_of() (fabric_lib/requests.h): the receiver's side of the same rules -------------
namespace fabric_lib {

uint64_t imm_count_of_write(uint64_t length, const Route& route, size_t domains) {
  return planner::count_contiguous(length, route, domains);
}

uint64_t imm_count_of(const WriteRequest& request, size_t domains) {
  return request.imm ? imm_count_of_write(request.length, request.route, domains) : 0;
}

uint64_t imm_count_of(const PagedWriteRequest& request, size_t /*domains*/) {
  return request.imm ? request.src_pages.size() : 0;
}

uint64_t imm_count_of_scatter_target(uint64_t length, ScatterSharding sharding, const Route& route, size_t domains) {
  if (sharding == ScatterSharding::kByBytes) return imm_count_of_write(length, route, domains);
  return imm_count_of_write(length, Pinned{0}, domains);
}

uint64_t imm_count_of(const ScatterRequest& request, size_t target_index, size_t domains) {
  if (!request.imm || target_index >= request.targets.size()) return 0;
  return imm_count_of_scatter_target(request.targets[target_index].length, request.sharding, request.route, domains);
}

}  // namespace fabric_lib

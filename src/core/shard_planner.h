// Sharding rules (DESIGN.md section 5): how one request is split over the domains of a group,
// and imm_count_of() (fabric_lib/requests.h), defined in shard_planner.cc beside them.
// The same functions decide what the engine posts and what imm_count_of() reports, so the
// sender's WRs and the receiver's expectation cannot disagree.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "fabric_lib/requests.h"

namespace fabric_lib::planner {

// One WR's worth of a contiguous transfer: bytes [offset, offset + length) of it, on `domain`.
struct WritePiece {
  uint64_t offset = 0;
  uint64_t length = 0;
  uint32_t domain = 0;
};

// A contiguous run [begin, end) of a paged request's page list, on `domain`.
struct PageRun {
  uint32_t begin = 0;
  uint32_t end = 0;
  uint32_t domain = 0;
};

// Where the shards of one contiguous write go. kRotate: shard i on domain_of(i) (each domain its
// own shard). kFirstDomain: every shard on domain_of(0) — for groups whose domains share one
// medium (DomainInfo::one_medium), where splitting adds per-domain work and no bandwidth. The
// shard layout, and so the WR and imm counts (imm_count_of_write), is the route's either way;
// only the domain that posts them differs.
enum class Placement : uint8_t { kRotate, kFirstDomain };

// How many domains `route` may use (1 for Pinned).
size_t shard_limit(const Route& route, size_t domains);
// The domain of the i-th shard (or scatter target) when the first one goes to `start`: shards
// rotate over shard_limit() consecutive domains.
uint32_t domain_of(size_t i, const Route& route, size_t domains, uint32_t start);

// How many WRs plan_contiguous() produces, without producing them.
uint64_t count_contiguous(uint64_t length, const Route& route, size_t domains);

// Splits `length` bytes into min(shard_limit(), max(1, length / kMinShardBytes)) shards of one
// size, a multiple of kShardAlignBytes (the last shard takes the remainder), then splits each
// shard into WRs of <= kMaxWrBytes. A length of 0
// gives one empty piece (an imm-only write). Calls `emit(WritePiece)` for each, in order; returns
// how many. (A callable, not a vector: the request planners write straight into the request's
// plan, with no scratch vector to allocate per submit.)
template <typename Emit>
size_t for_each_contiguous_piece(uint64_t length, const Route& route, size_t domains, uint32_t start, Emit&& emit,
                                 Placement placement = Placement::kRotate);
// The same pieces, appended to `out`; returns how many were appended.
size_t plan_contiguous(uint64_t length, const Route& route, size_t domains, uint32_t start,
                       std::vector<WritePiece>& out);

// Splits `pages` page indices into at most shard_limit() balanced contiguous runs, calling
// `emit(PageRun)` for each in order; returns how many.
template <typename Emit>
size_t for_each_page_run(size_t pages, const Route& route, size_t domains, uint32_t start, Emit&& emit);
// The same runs, appended to `out`.
size_t plan_pages(size_t pages, const Route& route, size_t domains, uint32_t start, std::vector<PageRun>& out);

// One work request of a planned operation. Offsets are absolute within the source region and
// within destination `target`'s region.
struct WrPlan {
  uint32_t domain = 0;
  uint32_t target = 0;
  uint64_t src_offset = 0;
  uint64_t dst_offset = 0;
  uint64_t length = 0;
};

// Whole-request plans. Every byte of the request appears in exactly one WrPlan; the local domain
// of a WrPlan is also the remote domain it writes to. `start` is the rotating first domain.
void plan_write(const WriteRequest& request, size_t domains, uint32_t start, std::vector<WrPlan>& out,
                Placement placement = Placement::kRotate);
// A write as ONE WR on `domain` standing for its route's shards, for a domain that counts a WR's
// imm several times (DomainInfo::takes_imm_count): appends that WR, which must then announce
// imm_count_of_write() arrivals (WriteWr::imm_count) — the receiver's expectation does not
// change. request.length <= kMaxWrBytes.
void plan_write_as_one(const WriteRequest& request, uint32_t domain, std::vector<WrPlan>& out);
void plan_paged(const PagedWriteRequest& request, size_t domains, uint32_t start, std::vector<WrPlan>& out);
// (kByBytes: each destination's shards placed by `placement`; kByPeer: one domain each anyway.)
void plan_scatter(const ScatterRequest& request, size_t domains, uint32_t start, std::vector<WrPlan>& out,
                  Placement placement = Placement::kRotate);

// The same plans from their parts, for prepared requests (fabric_lib/prepared.h).
struct PageGeometry {
  uint64_t page_length = 0;
  uint64_t src_stride = 0;
  uint64_t dst_stride = 0;
  uint64_t src_offset = 0;
  uint64_t dst_offset = 0;
};
void plan_page_list(std::span<const uint32_t> src_pages, std::span<const uint32_t> dst_pages, const PageGeometry& g,
                    const Route& route, size_t domains, uint32_t start, std::vector<WrPlan>& out);
// One destination of a scatter: its index (WrPlan::target, and the rotation of kByPeer) and bytes.
struct ScatterPiece {
  uint32_t target = 0;
  uint64_t length = 0;
  uint64_t src_offset = 0;
  uint64_t dst_offset = 0;
};
// Appends the WRs of one scatter destination (the same rule as plan_scatter's, per target).
void plan_scatter_piece(const ScatterPiece& piece, ScatterSharding sharding, const Route& route, size_t domains,
                        uint32_t start, std::vector<WrPlan>& out, Placement placement = Placement::kRotate);
// domain_of(i, route, domains, start) for i = 0, 1, 2, ... in turn, a step at a time: a scatter
// asks it once per destination, and its two divisions were a large part of planning a
// 64-destination scatter. `limit`: shard_limit(route, domains) gives domain_of's own rotation.
class DomainRotor {
 public:
  DomainRotor(const Route& route, size_t domains, uint32_t start, size_t limit);
  uint32_t next() {
    if (!rotates_) return fixed_;
    const uint32_t d = static_cast<uint32_t>(domain_);
    if (++step_ == limit_) {  // i % limit wraps: back to start's domain
      step_ = 0;
      domain_ = base_;
    } else if (++domain_ == domains_) {
      domain_ = 0;
    }
    return d;
  }

 private:
  bool rotates_ = false;
  uint32_t fixed_ = 0;  // Pinned's domain, or 0 without domains (as domain_of says)
  size_t domains_ = 0, limit_ = 1, base_ = 0, domain_ = 0, step_ = 0;
};

// A scatter's destinations planned in order, 0, 1, 2, ...: each one's WRs are
// plan_scatter_piece's, its domain stepped rather than computed. Every destination takes its
// turn: add() it, or pass() one that gets no WRs (an empty prepared slice without an imm).
class ScatterPlanner {
 public:
  ScatterPlanner(ScatterSharding sharding, const Route& route, size_t domains, uint32_t start, Placement placement);
  // `piece.target` is the destination's index in the sequence.
  void add(const ScatterPiece& piece, std::vector<WrPlan>& out);
  void pass() { rotor_.next(); }

 private:
  ScatterSharding sharding_;
  const Route& route_;  // the request's (or prepared scatter's), which outlives the planner
  size_t domains_;
  uint32_t start_;
  Placement placement_;
  DomainRotor rotor_;
};
// One zero-length WR per peer (imm-only and barrier), peers rotating over domains.
void plan_imm_only(size_t peers, size_t domains, uint32_t start, std::vector<WrPlan>& out);

// --- the templates' definitions -------------------------------------------------------------

// How a contiguous length is cut into shards (layout_of): `shards` of `shard_bytes`, the last
// taking the remainder. length > 0.
struct ShardLayout {
  uint64_t shards;
  uint64_t shard_bytes;
};
ShardLayout shard_layout(uint64_t length, const Route& route, size_t domains);

template <typename Emit>
size_t for_each_contiguous_piece(uint64_t length, const Route& route, size_t domains, uint32_t start, Emit&& emit,
                                 Placement placement) {
  if (length < 2 * kMinShardBytes) {  // one shard, one WR (and kMinShardBytes < kMaxWrBytes): no layout to compute
    static_assert(2 * kMinShardBytes <= kMaxWrBytes);
    emit(WritePiece{0, length, domain_of(0, route, domains, start)});
    return 1;
  }
  const ShardLayout l = shard_layout(length, route, domains);
  // Shard s goes on domain_of(s): s < shards <= shard_limit(), so that is (start + s) % domains,
  // one step from the shard before (more than one shard means a RoundRobin route, domains > 0).
  uint32_t domain = domain_of(0, route, domains, start);
  const bool rotate = placement == Placement::kRotate && l.shards > 1;
  if (l.shard_bytes <= kMaxWrBytes) {  // one WR a shard (any write under domains x kMaxWrBytes)
    uint64_t begin = 0;
    for (uint64_t s = 1; s < l.shards; ++s, begin += l.shard_bytes) {
      emit(WritePiece{begin, l.shard_bytes, domain});
      if (rotate && ++domain == domains) domain = 0;
    }
    emit(WritePiece{begin, length - begin, domain});
    return l.shards;
  }
  size_t n = 0;
  for (uint64_t s = 0, begin = 0; s < l.shards; ++s, begin += l.shard_bytes) {
    const uint64_t end = l.shard_bytes < length - begin ? begin + l.shard_bytes : length;
    for (uint64_t off = begin; off < end; off += kMaxWrBytes) {
      emit(WritePiece{off, end - off < kMaxWrBytes ? end - off : kMaxWrBytes, domain});
      ++n;
    }
    if (rotate && ++domain == domains) domain = 0;
  }
  return n;
}

template <typename Emit>
size_t for_each_page_run(size_t pages, const Route& route, size_t domains, uint32_t start, Emit&& emit) {
  if (pages == 0) return 0;
  const size_t limit = shard_limit(route, domains);
  const size_t runs = limit < pages ? limit : pages;
  const size_t base = pages / runs;
  const size_t extra = pages % runs;
  size_t begin = 0;
  for (size_t r = 0; r < runs; ++r) {
    const size_t n = base + (r < extra ? 1 : 0);
    emit(PageRun{static_cast<uint32_t>(begin), static_cast<uint32_t>(begin + n), domain_of(r, route, domains, start)});
    begin += n;
  }
  return runs;
}

}  // namespace fabric_lib::planner

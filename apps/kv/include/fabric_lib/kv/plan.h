// The transfer planner for heterogeneous TP: which prefill rank writes which bytes of each page to
// which decode rank, and how many imms a decode rank therefore receives. Pure functions: the
// prefiller and the decoder compute the same plan independently, from the layout and the two TP
// shapes, so nothing about the plan travels over the network.
//
// Rules (GQA): decode rank j needs heads [first_head_of_rank(j), + heads_per_rank). Each of those
// heads comes from exactly one prefill rank: the only holder when prefill TP <= kv_heads, else
// replica (j % replicas) of the head's holders, so decode ranks spread over the replicas. Heads of
// one page that come from one prefill rank and are adjacent on both sides form one write (K and V
// runs merge too when both sides stack them and the run covers whole pages). MLA: decode rank j
// reads its (replicated) latent pages from prefill rank j % prefill_tp, once: replicas are never
// sent twice to the same destination. The tail context of decode rank j comes from prefill rank
// j % prefill_tp, as one write, posted after the rank's last page write.
#pragma once

#include <cstdint>
#include <vector>

#include "fabric_lib/kv/layout.h"

namespace fabric_lib::kv {

// One side of a transfer: TP shape and how that rank packs its pages.
struct RankShape {
  uint32_t tp_rank = 0;
  uint32_t tp_size = 1;
  KvPacking packing = KvPacking::kSeparate;
};

// A byte range of one page copied from a prefill rank's page to a decode rank's page. Buffer 0 is
// the K (stacked, latent) buffer, 1 the V buffer; offsets are from the start of the page.
struct CopySegment {
  uint8_t src_buffer = 0;
  uint64_t src_offset = 0;
  uint8_t dst_buffer = 0;
  uint64_t dst_offset = 0;
  uint64_t length = 0;
  friend bool operator==(const CopySegment&, const CopySegment&) = default;
};

// What one prefill rank sends one decode rank, per layer and page (the same for every layer).
struct PairPlan {
  std::vector<CopySegment> segments;  // empty when the prefill rank supplies no KV to this rank
  bool sends_tail = false;
  bool empty() const { return segments.empty() && !sends_tail; }
};

// The plan from prefill rank `src` to decode rank `dst`. InvalidArgument for a TP degree the layout
// does not allow, a rank outside its TP size, or kStacked with MLA.
Result<PairPlan> plan_pair(const KvLayout& layout, const RankShape& src, const RankShape& dst);

// The prefill rank that writes decode rank j's tail.
inline uint32_t tail_source(uint32_t prefill_tp, uint32_t decode_rank) { return decode_rank % prefill_tp; }

// The prefill ranks decode rank `dst` must dispatch to (those with a non-empty plan), ascending.
Result<std::vector<uint32_t>> sources_of(const KvLayout& layout, uint32_t prefill_tp, KvPacking prefill_packing,
                                         const RankShape& dst);
// The decode ranks prefill rank `src` serves (and so expects dispatches from), ascending.
Result<std::vector<uint32_t>> destinations_of(const KvLayout& layout, const RankShape& src, uint32_t decode_tp,
                                              KvPacking decode_packing);

// Everything one decode rank receives for one request.
struct TransferShape {
  uint32_t pages = 0;         // pages written (the request's pages minus those the decoder already holds)
  uint64_t tail_bytes = 0;    // 0 = no tail
  size_t domains = 1;         // domains per group (the same on both sides)
};

// The imms prefill rank `src` delivers to decode rank `dst` for one request: for every layer and
// segment, imm_count_of() of a paged write of `pages` pages; plus imm_count_of() of the tail write
// when it sends the tail. Uses the engine's public imm_count_of (requests.h), so it stays right
// when the engine's sharding rules change.
uint64_t imm_count_of_pair(const KvLayout& layout, const PairPlan& plan, const TransferShape& shape);
// The total a decode rank expects: the sum over sources_of().
Result<uint64_t> expected_imm_count(const KvLayout& layout, uint32_t prefill_tp, KvPacking prefill_packing,
                                    const RankShape& dst, const TransferShape& shape);
// The number of paged-write requests (and WRs: one per page) prefill rank `src` posts for
// `pages` pages: layers * segments requests, layers * segments * pages WRs.
uint64_t work_requests_of_pair(const KvLayout& layout, const PairPlan& plan, uint32_t pages);

}  // namespace fabric_lib::kv

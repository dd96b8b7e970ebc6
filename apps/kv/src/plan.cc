#include "fabric_lib/kv/plan.h"

namespace fabric_lib::kv {

namespace {

Status check_shape(const KvLayout& layout, const RankShape& s, const char* side) {
  FABRIC_LIB_RETURN_IF_ERROR(validate_tp(layout, s.tp_size));
  if (s.tp_rank >= s.tp_size) return invalid_argument(std::string(side) + " rank outside its tp size");
  if (s.packing != KvPacking::kSeparate && s.packing != KvPacking::kStacked)
    return invalid_argument(std::string(side) + ": unknown packing");
  if (layout.kind == AttentionKind::kMla && s.packing != KvPacking::kSeparate)
    return invalid_argument(std::string(side) + ": MLA pages have one buffer (kSeparate)");
  return ok_status();
}

// The prefill rank that supplies `head` to decode rank `dst_rank`.
uint32_t holder_of(const KvLayout& layout, uint32_t head, uint32_t prefill_tp, uint32_t dst_rank) {
  const uint32_t h = layout.kv_heads;
  if (prefill_tp <= h) return head / (h / prefill_tp);
  const uint32_t replicas = prefill_tp / h;
  return head * replicas + dst_rank % replicas;
}

// Where heads [first, first + n) of K (v = false) or V start in a page of a rank holding
// `rank_heads` heads packed as `packing`: (buffer, offset).
std::pair<uint8_t, uint64_t> head_position(const KvLayout& layout, KvPacking packing, uint32_t rank_heads,
                                           uint32_t head_in_rank, bool v) {
  const uint64_t hb = layout.head_page_bytes();
  if (!v) return {0, head_in_rank * hb};
  if (packing == KvPacking::kSeparate) return {1, head_in_rank * hb};
  return {0, (rank_heads + head_in_rank) * hb};
}

}  // namespace

Result<PairPlan> plan_pair(const KvLayout& layout, const RankShape& src, const RankShape& dst) {
  FABRIC_LIB_RETURN_IF_ERROR(layout.validate());
  FABRIC_LIB_RETURN_IF_ERROR(check_shape(layout, src, "prefill"));
  FABRIC_LIB_RETURN_IF_ERROR(check_shape(layout, dst, "decode"));
  PairPlan plan;
  plan.sends_tail = src.tp_rank == tail_source(src.tp_size, dst.tp_rank);
  if (layout.kind == AttentionKind::kMla) {
    if (src.tp_rank == dst.tp_rank % src.tp_size) plan.segments.push_back({0, 0, 0, 0, layout.head_page_bytes()});
    return plan;
  }
  // The run of the decode rank's heads that this prefill rank supplies (at most one: with
  // prefill_tp <= heads the holders are blocks of heads; above it every head has its own holder).
  const uint32_t first = first_head_of_rank(layout, dst.tp_rank, dst.tp_size);
  const uint32_t count = heads_per_rank(layout, dst.tp_size);
  uint32_t run_begin = 0, run_len = 0;
  for (uint32_t x = first; x < first + count; ++x) {
    if (holder_of(layout, x, src.tp_size, dst.tp_rank) != src.tp_rank) continue;
    if (run_len == 0) run_begin = x;
    ++run_len;
  }
  if (run_len == 0) return plan;
  const uint32_t src_heads = heads_per_rank(layout, src.tp_size);
  const uint32_t src_first = first_head_of_rank(layout, src.tp_rank, src.tp_size);
  const uint64_t length = uint64_t(run_len) * layout.head_page_bytes();
  for (bool v : {false, true}) {
    auto [sb, so] = head_position(layout, src.packing, src_heads, run_begin - src_first, v);
    auto [db, doff] = head_position(layout, dst.packing, count, run_begin - first, v);
    CopySegment seg{sb, so, db, doff, length};
    if (!plan.segments.empty()) {
      CopySegment& prev = plan.segments.back();
      if (prev.src_buffer == seg.src_buffer && prev.dst_buffer == seg.dst_buffer &&
          prev.src_offset + prev.length == seg.src_offset && prev.dst_offset + prev.length == seg.dst_offset) {
        prev.length += seg.length;  // K and V adjacent on both sides (stacked, whole pages)
        continue;
      }
    }
    plan.segments.push_back(seg);
  }
  return plan;
}

Result<std::vector<uint32_t>> sources_of(const KvLayout& layout, uint32_t prefill_tp, KvPacking prefill_packing,
                                         const RankShape& dst) {
  std::vector<uint32_t> out;
  for (uint32_t i = 0; i < prefill_tp; ++i) {
    auto plan = plan_pair(layout, {i, prefill_tp, prefill_packing}, dst);
    if (!plan.ok()) return plan.status();
    if (!plan->empty()) out.push_back(i);
  }
  if (prefill_tp == 0) return invalid_argument("prefill tp size must be >= 1");
  return out;
}

Result<std::vector<uint32_t>> destinations_of(const KvLayout& layout, const RankShape& src, uint32_t decode_tp,
                                              KvPacking decode_packing) {
  std::vector<uint32_t> out;
  for (uint32_t j = 0; j < decode_tp; ++j) {
    auto plan = plan_pair(layout, src, {j, decode_tp, decode_packing});
    if (!plan.ok()) return plan.status();
    if (!plan->empty()) out.push_back(j);
  }
  if (decode_tp == 0) return invalid_argument("decode tp size must be >= 1");
  return out;
}

uint64_t imm_count_of_pair(const KvLayout& layout, const PairPlan& plan, const TransferShape& shape) {
  uint64_t total = 0;
  for (const CopySegment& seg : plan.segments) {
    // One page of this segment; pages count independently (requests.h: one WR per page), so a
    // layer's pages may be posted in any number of requests (chunked prefill) without changing it.
    PagedWriteRequest one;
    one.page_length = seg.length;
    one.src_pages = {0};
    one.dst_pages = {0};
    one.src_stride = one.dst_stride = seg.length;
    one.imm = 0;
    total += imm_count_of(one, shape.domains) * shape.pages * layout.num_layers;
  }
  if (plan.sends_tail && shape.tail_bytes > 0) {
    WriteRequest tail;
    tail.length = shape.tail_bytes;
    tail.imm = 0;
    total += imm_count_of(tail, shape.domains);
  }
  return total;
}

Result<uint64_t> expected_imm_count(const KvLayout& layout, uint32_t prefill_tp, KvPacking prefill_packing,
                                    const RankShape& dst, const TransferShape& shape) {
  uint64_t total = 0;
  for (uint32_t i = 0; i < prefill_tp; ++i) {
    auto plan = plan_pair(layout, {i, prefill_tp, prefill_packing}, dst);
    if (!plan.ok()) return plan.status();
    total += imm_count_of_pair(layout, *plan, shape);
  }
  if (prefill_tp == 0) return invalid_argument("prefill tp size must be >= 1");
  return total;
}

uint64_t work_requests_of_pair(const KvLayout& layout, const PairPlan& plan, uint32_t pages) {
  return uint64_t(layout.num_layers) * plan.segments.size() * pages;
}

}  // namespace fabric_lib::kv

// The planner against a byte-level simulation: every decode rank's page must end up holding
// exactly its heads' K and V (written once each), for every TP pair and packing.
#include <gtest/gtest.h>

#include <map>

#include "fabric_lib/kv/plan.h"

namespace fabric_lib::kv {
namespace {

KvLayout small(uint32_t heads, AttentionKind kind = AttentionKind::kGqa) {
  return {kind, DType::kU8, 2, 2, 3, kind == AttentionKind::kMla ? 1 : heads};  // 6-byte head pages
}

// The byte a rank holds at offset `o` of buffer `b` of a page: identifies (head, K/V, byte).
std::vector<std::vector<int>> rank_page(const KvLayout& l, const RankShape& s) {
  const uint32_t hb = l.head_page_bytes(), n = heads_per_rank(l, s.tp_size), first = first_head_of_rank(l, s.tp_rank, s.tp_size);
  const bool stacked = s.packing == KvPacking::kStacked;
  const bool one_buffer = stacked || l.kind == AttentionKind::kMla;
  std::vector<std::vector<int>> buffers(one_buffer ? 1 : 2, std::vector<int>((stacked ? 2 : 1) * n * hb));
  for (int kvv = 0; kvv < (l.kind == AttentionKind::kMla ? 1 : 2); ++kvv)
    for (uint32_t h = 0; h < n; ++h)
      for (uint32_t byte = 0; byte < hb; ++byte) {
        const int value = int((first + h) * 1000 + kvv * 100 + byte);
        if (stacked) buffers[0][(kvv * n + h) * hb + byte] = value;
        else buffers[kvv][h * hb + byte] = value;
      }
  return buffers;
}

void check_pair_plans(const KvLayout& l, uint32_t p, KvPacking pp, uint32_t d, KvPacking dp) {
  SCOPED_TRACE("p=" + std::to_string(p) + " d=" + std::to_string(d) + " packing " + std::to_string(int(pp)) + "->" +
               std::to_string(int(dp)));
  for (uint32_t j = 0; j < d; ++j) {
    const RankShape dst{j, d, dp};
    std::vector<std::vector<int>> want = rank_page(l, dst);
    std::vector<std::vector<int>> got(want.size(), std::vector<int>(want[0].size(), -1));
    std::vector<std::vector<int>> writes(want.size(), std::vector<int>(want[0].size(), 0));
    uint32_t tails = 0;
    for (uint32_t i = 0; i < p; ++i) {
      auto plan = plan_pair(l, {i, p, pp}, dst);
      ASSERT_TRUE(plan.ok()) << plan.status().to_string();
      tails += plan->sends_tail;
      const auto src = rank_page(l, {i, p, pp});
      for (const CopySegment& s : plan->segments) {
        ASSERT_LT(s.src_buffer, src.size());
        ASSERT_LE(s.src_offset + s.length, src[s.src_buffer].size());
        ASSERT_LT(s.dst_buffer, got.size());
        ASSERT_LE(s.dst_offset + s.length, got[s.dst_buffer].size());
        for (uint64_t b = 0; b < s.length; ++b) {
          got[s.dst_buffer][s.dst_offset + b] = src[s.src_buffer][s.src_offset + b];
          writes[s.dst_buffer][s.dst_offset + b]++;
        }
      }
    }
    EXPECT_EQ(tails, 1u) << "exactly one prefill rank sends rank " << j << "'s tail";
    EXPECT_EQ(got, want) << "decode rank " << j << " holds the wrong bytes";
    for (const auto& w : writes)
      for (int c : w) ASSERT_EQ(c, 1) << "a byte of decode rank " << j << " is written " << c << " times";
  }
}

TEST(KvPlan, EveryDecodeRankGetsExactlyItsHeadsFromOneSource) {
  const KvLayout l = small(4);
  for (uint32_t p : {1u, 2u, 4u, 8u})
    for (uint32_t d : {1u, 2u, 4u, 8u})
      for (KvPacking pp : {KvPacking::kSeparate, KvPacking::kStacked})
        for (KvPacking dp : {KvPacking::kSeparate, KvPacking::kStacked}) check_pair_plans(l, p, pp, d, dp);
}

TEST(KvPlan, SegmentCountsForTheIssuesTpPairs) {
  const KvLayout l = small(4);
  struct Case { uint32_t p, d, sources_per_rank; };
  for (Case c : {Case{2, 1, 2}, Case{1, 2, 1}, Case{4, 2, 2}, Case{8, 2, 2}}) {
    for (uint32_t j = 0; j < c.d; ++j) {
      uint32_t with_kv = 0;
      for (uint32_t i = 0; i < c.p; ++i) {
        auto plan = plan_pair(l, {i, c.p, KvPacking::kSeparate}, {j, c.d, KvPacking::kSeparate});
        ASSERT_TRUE(plan.ok());
        if (plan->segments.empty()) continue;
        ++with_kv;
        EXPECT_EQ(plan->segments.size(), 2u) << "one K and one V run";
      }
      EXPECT_EQ(with_kv, c.sources_per_rank) << c.p << "->" << c.d;
    }
  }
  // 8 -> 2: decode rank 0 (heads 0, 1) reads head 0 from rank 0 and head 1 from rank 2 (replica 0);
  // decode rank 1 (heads 2, 3) from replica 1: ranks 5 and 7.
  EXPECT_EQ(*sources_of(l, 8, KvPacking::kSeparate, {0, 2, KvPacking::kSeparate}), (std::vector<uint32_t>{0, 2}));
  EXPECT_EQ(*sources_of(l, 8, KvPacking::kSeparate, {1, 2, KvPacking::kSeparate}), (std::vector<uint32_t>{1, 5, 7}))
      << "rank 1 also gets its tail from prefill rank 1";
  auto dests = destinations_of(l, {5, 8, KvPacking::kSeparate}, 2, KvPacking::kSeparate);
  EXPECT_EQ(*dests, (std::vector<uint32_t>{1}));
}

TEST(KvPlan, StackedWholePagesMergeKAndV) {
  const KvLayout l = small(4);
  auto plan = plan_pair(l, {0, 1, KvPacking::kStacked}, {0, 1, KvPacking::kStacked});
  ASSERT_EQ(plan->segments.size(), 1u);
  EXPECT_EQ(plan->segments[0].length, 2u * 4 * l.head_page_bytes());
  auto half = plan_pair(l, {0, 2, KvPacking::kStacked}, {0, 1, KvPacking::kStacked});
  EXPECT_EQ(half->segments.size(), 2u) << "half the heads: K and V runs are apart in the decode page";
}

TEST(KvPlan, MlaReplicasAreSentOncePerDestination) {
  const KvLayout l = small(1, AttentionKind::kMla);
  for (uint32_t p : {1u, 2u, 4u})
    for (uint32_t d : {1u, 2u, 4u, 8u}) {
      check_pair_plans(l, p, KvPacking::kSeparate, d, KvPacking::kSeparate);
      for (uint32_t j = 0; j < d; ++j) {
        uint64_t segments = 0;
        for (uint32_t i = 0; i < p; ++i) segments += plan_pair(l, {i, p}, {j, d})->segments.size();
        EXPECT_EQ(segments, 1u);
      }
    }
  EXPECT_FALSE(plan_pair(l, {0, 1, KvPacking::kStacked}, {0, 1}).ok());
}

TEST(KvPlan, ImmCountsFollowTheEnginesRules) {
  const KvLayout l = {AttentionKind::kGqa, DType::kBF16, 5, 16, 128, 4};
  const RankShape dst{0, 1, KvPacking::kSeparate};
  // TP 2 -> 1: two sources, each K + V per layer and page; the tail from rank 0.
  for (size_t domains : {1u, 4u}) {
    const TransferShape shape{7, 300000, domains};
    auto n = expected_imm_count(l, 2, KvPacking::kSeparate, dst, shape);
    ASSERT_TRUE(n.ok());
    WriteRequest tail;
    tail.length = shape.tail_bytes;
    tail.imm = 1;
    EXPECT_EQ(*n, 2u * 2 * 5 * 7 + imm_count_of(tail, domains));
  }
  EXPECT_EQ(*expected_imm_count(l, 2, KvPacking::kSeparate, dst, {0, 0, 1}), 0u);
  auto plan = plan_pair(l, {1, 2}, dst);
  EXPECT_EQ(work_requests_of_pair(l, *plan, 7), 5u * 2 * 7);
  EXPECT_FALSE(expected_imm_count(l, 3, KvPacking::kSeparate, dst, {1, 0, 1}).ok());
}

}  // namespace
}  // namespace fabric_lib::kv

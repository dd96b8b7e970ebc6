#include <gtest/gtest.h>

#include "fabric_lib/kv/layout.h"

namespace fabric_lib::kv {
namespace {

KvLayout gqa(uint32_t heads = 4) { return {AttentionKind::kGqa, DType::kBF16, 3, 16, 64, heads}; }

TEST(KvLayout, ValidatesEveryField) {
  EXPECT_TRUE(gqa().validate().ok());
  KvLayout l = gqa();
  l.num_layers = 0;
  EXPECT_EQ(l.validate().code(), ErrorCode::kInvalidArgument);
  l = gqa();
  l.page_tokens = 0;
  EXPECT_FALSE(l.validate().ok());
  l = gqa();
  l.dtype = static_cast<DType>(99);
  EXPECT_FALSE(l.validate().ok());
  l = gqa();
  l.kind = AttentionKind::kMla;
  EXPECT_FALSE(l.validate().ok()) << "MLA needs kv_heads == 1";
  l.kv_heads = 1;
  EXPECT_TRUE(l.validate().ok());
}

TEST(KvLayout, FingerprintChangesWithEveryFieldAndMismatchNamesThem) {
  const KvLayout base = gqa();
  std::vector<KvLayout> variants(6, base);
  variants[0].kind = AttentionKind::kMla;
  variants[1].dtype = DType::kF16;
  variants[2].num_layers = 4;
  variants[3].page_tokens = 32;
  variants[4].head_dim = 128;
  variants[5].kv_heads = 8;
  for (const KvLayout& v : variants) {
    EXPECT_NE(v.fingerprint(), base.fingerprint()) << v.to_string();
    EXPECT_FALSE(base.describe_mismatch(v).empty());
  }
  EXPECT_EQ(base.describe_mismatch(base), "");
  EXPECT_EQ(base.describe_mismatch(variants[3]), "page_tokens 16 != 32");
  EXPECT_EQ(base.fingerprint(), gqa().fingerprint());
}

TEST(KvLayout, TensorParallelHeadsSplitAndReplicate) {
  const KvLayout l = gqa(4);
  EXPECT_TRUE(validate_tp(l, 1).ok());
  EXPECT_TRUE(validate_tp(l, 2).ok());
  EXPECT_TRUE(validate_tp(l, 8).ok());
  EXPECT_FALSE(validate_tp(l, 3).ok());
  EXPECT_FALSE(validate_tp(l, 6).ok());
  EXPECT_EQ(heads_per_rank(l, 2), 2u);
  EXPECT_EQ(first_head_of_rank(l, 1, 2), 2u);
  EXPECT_EQ(heads_per_rank(l, 8), 1u);
  for (uint32_t r = 0; r < 8; ++r) EXPECT_EQ(first_head_of_rank(l, r, 8), r / 2);
  EXPECT_TRUE(rank_holds_head(l, 3, 4, 3));
  EXPECT_FALSE(rank_holds_head(l, 3, 4, 2));
}

TEST(KvMemoryLayout, ContiguousFitsItsRegionAndValidationCatchesOverruns) {
  const KvLayout l = gqa(4);
  uint64_t total = 0;
  KvMemoryLayout m = KvMemoryLayout::contiguous(l, 2, KvPacking::kSeparate, 10, 128, 0, &total);
  EXPECT_EQ(m.page_stride, 2u * 16 * 64 * 2);
  EXPECT_EQ(total, 3u * 2 * 10 * m.page_stride);
  EXPECT_TRUE(m.validate(l, 2, {128 + total}).ok());
  EXPECT_EQ(m.validate(l, 2, {128 + total - 1}).code(), ErrorCode::kOutOfRange);
  KvMemoryLayout stacked = KvMemoryLayout::contiguous(l, 1, KvPacking::kStacked, 4);
  EXPECT_EQ(stacked.v.size(), 0u);
  EXPECT_EQ(stacked.page_stride, 2u * 4 * 16 * 64 * 2);
  EXPECT_TRUE(stacked.validate(l, 1).ok());
  stacked.v.push_back({0, 0});
  EXPECT_FALSE(stacked.validate(l, 1).ok());
  KvMemoryLayout bad_region = m;
  bad_region.k[1].region = 3;
  EXPECT_FALSE(bad_region.validate(l, 2, {1ull << 40}).ok());
}

}  // namespace
}  // namespace fabric_lib::kv

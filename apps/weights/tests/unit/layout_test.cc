#include <gtest/gtest.h>

#include "fabric_lib/weights/layout.h"

namespace fabric_lib::weights {
namespace {

TEST(Layout, FsdpChunksLikeTorchChunk) {
  // 10 rows over 4 ranks: chunk 3 -> 3, 3, 3, 1.
  EXPECT_EQ(fsdp_rows(10, 1, 4, 0).end, 3u);
  EXPECT_EQ(fsdp_rows(10, 1, 4, 3).begin, 9u);
  EXPECT_EQ(fsdp_rows(10, 1, 4, 3).end, 10u);
  // 5 rows over 4: chunk 2 -> 2, 2, 1, 0.
  const RowRange last = fsdp_rows(5, 1, 4, 3);
  EXPECT_EQ(last.begin, last.end);
  // 3-D [4, 8, 16] over 2: dim-0 halves = 16 rows of the [32, 16] view each.
  Result<Box> b = trainer_box("w", {4, 8, 16}, {2, 1});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, (Box{16, 32, 0, 16}));
}

TEST(Layout, TrainerTpThenFsdp) {
  TrainerPlacement p;
  p.tp_size = 2;
  p.tp_rank = 1;
  p.tp_split = TpSplit::kCols;
  p.fsdp_size = 2;
  p.fsdp_rank = 1;
  Result<Box> b = trainer_box("o", {8, 6}, p);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, (Box{4, 8, 3, 6}));
  p.tp_size = 4;
  Result<Box> bad = trainer_box("o", {8, 6}, p);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'o'"), std::string::npos);
}

TEST(Layout, FusedQkvAndRowParallel) {
  const std::vector<SourceSlice> qkv = {{"q", Box{0, 8, 0, 4}}, {"k", Box{0, 4, 0, 4}}, {"v", Box{0, 4, 0, 4}}};
  Result<InferenceTensor> t = tp_tensor("qkv", qkv, TpSplit::kRows, 2, 1, DType::kBf16);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->rows, 8u);
  EXPECT_EQ(t->cols, 4u);
  ASSERT_EQ(t->pieces.size(), 3u);
  EXPECT_EQ(t->pieces[0], (DestPiece{"q", Box{4, 8, 0, 4}, 0, 0}));
  EXPECT_EQ(t->pieces[1], (DestPiece{"k", Box{2, 4, 0, 4}, 4, 0}));
  EXPECT_EQ(t->pieces[2], (DestPiece{"v", Box{2, 4, 0, 4}, 6, 0}));
  Result<InferenceTensor> o = tp_tensor("o", {{"o", Box{0, 4, 0, 8}}}, TpSplit::kCols, 2, 0, DType::kBf16);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->pieces[0].src, (Box{0, 4, 0, 4}));
  EXPECT_FALSE(tp_tensor("x", qkv, TpSplit::kRows, 3, 0, DType::kBf16).ok());
  EXPECT_FALSE(tp_tensor("x", {{"a", Box{0, 2, 0, 4}}, {"b", Box{0, 2, 0, 3}}}, TpSplit::kRows, 1, 0, DType::kBf16).ok());
}

TEST(Layout, ExpertsAndNameMapping) {
  EXPECT_EQ(expert_rows({4, 6, 8}, 2), (Box{12, 18, 0, 8}));
  Result<std::vector<uint64_t>> e = ep_experts(8, 4, 3);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(*e, (std::vector<uint64_t>{6, 7}));
  EXPECT_FALSE(ep_experts(6, 4, 0).ok());
  NameMapping m;
  m.rename("lm_head.", "lm_head.");
  m.rename("", "model.");
  m.fuse("qkv_proj.weight", {"q_proj.weight", "k_proj.weight", "v_proj.weight"});
  EXPECT_EQ(m.sources_of("layers.3.self_attn.qkv_proj.weight"),
            (std::vector<std::string>{"model.layers.3.self_attn.q_proj.weight", "model.layers.3.self_attn.k_proj.weight",
                                      "model.layers.3.self_attn.v_proj.weight"}));
  EXPECT_EQ(m.sources_of("lm_head.weight"), (std::vector<std::string>{"lm_head.weight"}));
  EXPECT_EQ(m.trainer_name("norm.weight"), "model.norm.weight");
}

}  // namespace
}  // namespace fabric_lib::weights

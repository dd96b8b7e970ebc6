// MoeConfig validation, the derived geometry and the memory formula.
#include <gtest/gtest.h>

#include "fabric_lib/moe/config.h"

namespace fabric_lib::moe {
namespace {

MoeConfig deepseek_decode(uint32_t world) {
  MoeConfig c;
  c.max_num_tokens = 128;
  c.num_experts = 256;
  c.experts_per_token = 8;
  c.hidden_dim = 7168;
  c.hidden_dim_scale = 7168 / 128;
  c.in_dtype = DType::kFp8E4M3;
  c.out_dtype = DType::kBf16;
  c.world_size = world;
  return c;
}

TEST(MoeConfig, RejectsEachBadField) {
  MoeConfig ok = deepseek_decode(8);
  ASSERT_TRUE(ok.validate().ok()) << ok.validate().to_string();
  auto expect_bad = [](MoeConfig c, const char* field) {
    Status s = c.validate();
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << field;
    EXPECT_NE(s.message().find(field), std::string::npos) << s.message();
  };
  MoeConfig c = ok;
  c.world_size = 0;
  expect_bad(c, "world_size");
  c = ok;
  c.rank = 8;
  expect_bad(c, "rank");
  c = ok;
  c.num_experts = 255;
  expect_bad(c, "num_experts");
  c = ok;
  c.experts_per_token = 0;
  expect_bad(c, "experts_per_token");
  c = ok;
  c.hidden_dim_scale = 8000;
  expect_bad(c, "hidden_dim_scale");
  c = ok;
  c.out_dtype = DType::kFp8E4M3;
  expect_bad(c, "out_dtype");
  c = ok;
  c.expert_padding = 0;
  expect_bad(c, "expert_padding");
  c = ok;
  c.max_private_tokens = 128 * 8 + 1;
  expect_bad(c, "max_private_tokens");
  c = ok;
  c.path = Path::kDirect;
  c.overflow_tokens = 100;
  expect_bad(c, "overflow_tokens");
  c = ok;
  c.step_timeout = std::chrono::milliseconds(0);
  expect_bad(c, "step_timeout");
}

TEST(MoeConfig, FingerprintIgnoresRankOnly) {
  MoeConfig a = deepseek_decode(4), b = a;
  b.rank = 3;
  b.proxy_cpu = 5;
  EXPECT_EQ(a.fingerprint(), b.fingerprint());
  b.max_private_tokens = 7;
  EXPECT_NE(a.fingerprint(), b.fingerprint());
  b = a;
  b.hidden_dim_scale = 0;
  EXPECT_NE(a.fingerprint(), b.fingerprint());
}

TEST(Geometry, DeepSeekV3DecodeEp8) {
  const Geometry g = Geometry::from(deepseek_decode(8));
  EXPECT_EQ(g.local_experts, 32u);
  EXPECT_EQ(g.x_bytes, 7168u);
  EXPECT_EQ(g.dispatch_record, 7168u + 224u);
  EXPECT_EQ(g.combine_record, 7168u * 2);
  // P = floor(ceil(128*8/256) * 1.2) * 32 = 4 * 32, as pplx-garden's default.
  EXPECT_EQ(g.private_tokens, 128u);
  EXPECT_EQ(g.max_pairs, 1024u);
  EXPECT_EQ(g.max_pairs_per_rank, 1024u);  // min(K, L) = 8
  // Worst case: each of the 7 peers sends all its 1024 pairs here, 128 of them privately.
  EXPECT_EQ(g.overflow_tokens, 7u * (1024 - 128));
  EXPECT_EQ(g.recv_slots, 8u * 128 + 7 * 896);
  EXPECT_EQ(g.max_recv_tokens, 8u * 1024);
  const BufferPlan b = BufferPlan::from(g);
  EXPECT_EQ(b.dispatch_send, 1024u * 7392);
  EXPECT_EQ(b.dispatch_recv, size_t{8 * 128 + 7 * 896} * 7392);
  EXPECT_EQ(b.combine_send, size_t{7 * 128 + 7 * 896} * 14336);
  EXPECT_EQ(b.combine_recv, 1024u * 14336);
  EXPECT_EQ(b.total(), b.route_send + b.route_recv + b.dispatch_send + b.dispatch_recv + b.combine_send +
                           b.combine_recv + b.control + b.workspace);
  EXPECT_NE(b.describe(g).find("total per rank"), std::string::npos);
}

TEST(Geometry, OverflowCapacityShrinksTheBuffers) {
  MoeConfig c = deepseek_decode(8);
  const BufferPlan worst = BufferPlan::from(Geometry::from(c));
  c.overflow_tokens = 1024;
  const Geometry g = Geometry::from(c);
  EXPECT_EQ(g.overflow_tokens, 1024u);
  EXPECT_EQ(g.max_recv_tokens, 1024u + 7 * 128 + 1024);
  const BufferPlan b = BufferPlan::from(g);
  EXPECT_LT(b.total() * 2, worst.total());  // 65 MiB instead of 179 MiB
}

TEST(Geometry, DirectPathHasNoOverflowOrStaging) {
  MoeConfig c = deepseek_decode(4);
  c.path = Path::kDirect;
  const Geometry g = Geometry::from(c);
  EXPECT_EQ(g.overflow_tokens, 0u);
  EXPECT_EQ(g.combine_stage_rows, 0u);
  EXPECT_EQ(g.max_recv_tokens, 4u * 1024);
}

TEST(Geometry, PaddingRoundsEveryExpert) {
  MoeConfig c = deepseek_decode(2);
  c.expert_padding = 128;
  const Geometry g = Geometry::from(c);
  EXPECT_EQ(g.max_recv_tokens % 128, 0u);
  EXPECT_GE(g.max_recv_tokens, 2u * 1024 + 128u * 127);
}

}  // namespace
}  // namespace fabric_lib::moe

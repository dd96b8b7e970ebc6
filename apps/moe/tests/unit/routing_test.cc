// Sender routing and the step plan: positions, the receive layout, and that what each sender
// writes lands exactly where each receiver reads (checked over random and extreme routings).
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "fabric_lib/moe/routing.h"

namespace fabric_lib::moe {
namespace {

MoeConfig small(uint32_t world, uint32_t rank, uint32_t p, uint32_t c = kAuto) {
  MoeConfig m;
  m.max_num_tokens = 16;
  m.num_experts = 4 * world;
  m.experts_per_token = 3;
  m.hidden_dim = 8;
  m.world_size = world;
  m.rank = rank;
  m.max_private_tokens = p;
  m.overflow_tokens = c;
  m.expert_padding = 4;
  return m;
}

TEST(RouteTokens, StableSortedPositions) {
  const Geometry g = Geometry::from(small(2, 0, 4));
  // tokens: {1,5,2}, {5,1,0}, {7,6,5}
  const uint32_t idx[] = {1, 5, 2, 5, 1, 0, 7, 6, 5};
  Result<LocalRouting> r = route_tokens(g, idx, 3, 3);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->counts, (std::vector<uint32_t>{1, 2, 1, 0, 0, 3, 1, 1}));
  EXPECT_EQ(r->expert_offset, (std::vector<uint32_t>{0, 1, 3, 4, 4, 4, 7, 8, 9}));
  // expert 1: token 0 then token 1; expert 5: tokens 0, 1, 2 in order.
  EXPECT_EQ(r->position, (std::vector<uint32_t>{1, 4, 3, 5, 2, 0, 8, 7, 6}));
  EXPECT_EQ(r->rank_begin(g, 1), 4u);
  EXPECT_EQ(r->rank_count(g, 1), 5u);
}

TEST(RouteTokens, RejectsBadInput) {
  const Geometry g = Geometry::from(small(2, 0, 4));
  const uint32_t bad[] = {1, 8, 2};
  EXPECT_EQ(route_tokens(g, bad, 3, 1).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(route_tokens(g, bad, 3, 17).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(route_tokens(g, nullptr, 3, 0).ok());
}

// For random count matrices: simulate every sender's writes into every receiver's rows and check
// that each receiver's locate_record finds each pair exactly where it was written.
void check_world(uint32_t W, uint32_t P, uint32_t C, std::mt19937& rng, int mode) {
  const uint32_t E = 4 * W, M = 16, K = 3;
  std::vector<std::vector<uint32_t>> counts(W, std::vector<uint32_t>(E, 0));
  for (uint32_t s = 0; s < W; ++s) {
    for (uint32_t t = 0; t < M; ++t) {
      std::set<uint32_t> chosen;
      while (chosen.size() < K) chosen.insert(mode == 1 ? static_cast<uint32_t>(chosen.size()) : rng() % E);
      for (uint32_t e : chosen) ++counts[s][e];
    }
  }
  std::vector<std::span<const uint32_t>> views;
  for (auto& c : counts) views.emplace_back(c);
  // written[(r, row)] = (s, q): pair q of s's block for r.
  std::map<std::pair<uint32_t, uint32_t>, std::pair<uint32_t, uint32_t>> written;
  std::vector<Result<StepPlan>> plans;
  for (uint32_t me = 0; me < W; ++me) {
    const Geometry g = Geometry::from(small(W, me, P, C));
    plans.push_back(plan_step(g, 9, views));
  }
  // Every rank agrees on success or on the same failure.
  for (uint32_t me = 1; me < W; ++me) {
    ASSERT_EQ(plans[me].ok(), plans[0].ok());
    if (!plans[0].ok()) {
      EXPECT_EQ(plans[me].status().message(), plans[0].status().message());
    }
  }
  if (!plans[0].ok()) {
    EXPECT_EQ(plans[0].status().code(), ErrorCode::kResourceExhausted);
    return;
  }
  for (uint32_t s = 0; s < W; ++s) {
    for (const PeerSend& ps : plans[s]->sends) {
      for (uint32_t q = 0; q < ps.count; ++q) {
        const uint32_t row = q < P ? s * P + q : ps.overflow_row + (q - P);
        ASSERT_LT(row, W * P + Geometry::from(small(W, 0, P, C)).overflow_tokens);
        ASSERT_TRUE(written.insert({{ps.peer, row}, {s, q}}).second) << "two pairs land on one row";
      }
    }
  }
  for (uint32_t r = 0; r < W; ++r) {
    const Geometry g = Geometry::from(small(W, r, P, C));
    const RecvPlanLayout lay{W, g.local_experts};
    const uint32_t* plan = plans[r]->recv_plan.data();
    std::set<uint32_t> out_rows;
    for (uint32_t e = 0; e < g.local_experts; ++e) {
      EXPECT_EQ(plan[lay.pad_off(e)] % g.padding, 0u);
      for (uint32_t s = 0; s < W; ++s) {
        for (uint32_t j = 0; j < plan[lay.cnt(s, e)]; ++j) {
          const RecordLocation loc = locate_record(lay, plan, r, P, false, s, e, j);
          const uint32_t q = plan[lay.blk(s, e)] + j;
          if (s == r) {
            EXPECT_EQ(loc.where, RecordSource::kOwnSendBuffer);
          } else {
            ASSERT_EQ(loc.where, RecordSource::kRecvBuffer);
            auto it = written.find({r, loc.row});
            ASSERT_NE(it, written.end());
            EXPECT_EQ(it->second, std::make_pair(s, q));
          }
          EXPECT_TRUE(out_rows.insert(output_row(lay, plan, s, e, j)).second);
        }
      }
    }
    EXPECT_LE(plan[2], g.max_recv_tokens);
    // The combine write of r to s goes where s's pairs for r started in s's order.
    for (const PeerCombine& pc : plans[r]->combines) {
      const Geometry gs = Geometry::from(small(W, pc.peer, P, C));
      const PeerSend* back = nullptr;
      for (const PeerSend& ps : plans[pc.peer]->sends) {
        if (ps.peer == r) back = &ps;
      }
      ASSERT_NE(back, nullptr);
      EXPECT_EQ(pc.count, back->count);
      EXPECT_EQ(pc.dst_row, back->src_row);
      EXPECT_LE(pc.stage_row + pc.count, g.combine_stage_rows);
      (void)gs;
    }
  }
}

TEST(PlanStep, SendersAndReceiversAgree) {
  std::mt19937 rng(7);
  for (uint32_t W : {1u, 2u, 3u, 4u, 8u}) {
    for (uint32_t P : {0u, 1u, 5u, 48u}) {
      for (int mode : {0, 1}) check_world(W, P, kAuto, rng, mode);
    }
  }
}

TEST(PlanStep, TooLittleOverflowFailsOnEveryRank) {
  std::mt19937 rng(3);
  // mode 1: every token of every rank to experts 0..2 (rank 0): overflow at rank 0 is large.
  check_world(4, 2, 10, rng, 1);
  const Geometry g = Geometry::from(small(2, 1, 0, 3));
  std::vector<uint32_t> a(8, 0), b(8, 0);
  a[4] = 4;  // rank 0 sends 4 pairs to rank 1, which has 3 overflow rows and no private slot
  std::vector<std::span<const uint32_t>> v = {a, b};
  Result<StepPlan> p = plan_step(g, 1, v);
  ASSERT_EQ(p.status().code(), ErrorCode::kResourceExhausted);
  EXPECT_NE(p.status().message().find("rank 1 would receive 4"), std::string::npos) << p.status().message();
  a[4] = 3;
  EXPECT_TRUE(plan_step(g, 1, v).ok());
}

TEST(PlanStep, EmptyExpertsAndEmptyRanks) {
  const Geometry g = Geometry::from(small(3, 1, 2));
  std::vector<uint32_t> zero(12, 0), some(12, 0);
  some[4] = 3;
  some[7] = 1;
  std::vector<std::span<const uint32_t>> v = {zero, some, zero};
  Result<StepPlan> p = plan_step(g, 1, v);
  ASSERT_TRUE(p.ok());
  const RecvPlanLayout lay{3, 4};
  EXPECT_EQ(p->recv_plan[lay.total(0)], 3u);
  EXPECT_EQ(p->recv_plan[lay.total(1)], 0u);
  EXPECT_EQ(p->recv_plan[lay.total(3)], 1u);
  EXPECT_EQ(p->recv_plan[lay.pad_off(3)], 4u);  // 3 rounded up to the padding of 4
  EXPECT_EQ(p->recv_plan[2], 8u);
  for (const PeerSend& ps : p->sends) EXPECT_EQ(ps.count, 0u);
}

}  // namespace
}  // namespace fabric_lib::moe

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "support/fixtures.h"
#include "support/simulate.h"

namespace fabric_lib::weights::testing {
namespace {

// Plans the test model for T trainers -> I inference ranks, runs it with memcpy, and compares
// every byte of every inference region with the single-process reference load.
void check_end_to_end(uint32_t T, uint32_t I, bool fp8, uint32_t domains, uint64_t step) {
  Result<Schedule> s = plan_schedule(model_trainers(T, domains), model_inference(I, fp8, domains));
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  std::vector<std::vector<TrainerShard>> shards;
  std::vector<std::vector<uint8_t>> arenas(T);
  std::vector<std::vector<std::vector<uint8_t>*>> tregions(T);
  for (uint32_t t = 0; t < T; ++t) {
    const TrainerLayout l = trainer_layout(t, T);
    shards.push_back(l.shards);
    arenas[t].resize(l.arena_bytes);
    fill_trainer_arena(l, step, arenas[t].data());
    tregions[t] = {&arenas[t]};
  }
  std::vector<std::vector<uint8_t>> data(I), scales(I);
  std::vector<std::vector<std::vector<uint8_t>*>> iregions(I);
  for (uint32_t r = 0; r < I; ++r) {
    const InferenceLayout l = inference_layout(r, I, fp8);
    data[r].assign(l.data_bytes, 0xee);
    scales[r].assign(l.scale_bytes, 0xee);
    iregions[r] = {&data[r], &scales[r]};
  }
  ASSERT_TRUE(simulate(*s, shards, tregions, iregions).ok());
  for (uint32_t r = 0; r < I; ++r) {
    const InferenceLayout l = inference_layout(r, I, fp8);
    std::vector<uint8_t> want_d(l.data_bytes), want_s(l.scale_bytes);
    reference_load(l, step, want_d.data(), want_s.data(), 0xee);
    for (const InferenceTensor& t : l.tensors) {
      ASSERT_EQ(0, std::memcmp(data[r].data() + t.offset, want_d.data() + t.offset, t.bytes())) << "rank " << r << " " << t.name;
      ASSERT_EQ(0, std::memcmp(scales[r].data() + t.scale_offset, want_s.data() + t.scale_offset, t.scale_bytes()))
          << "rank " << r << " scales of " << t.name;
    }
    ASSERT_EQ(data[r], want_d) << "rank " << r << ": bytes outside tensors changed";
    ASSERT_EQ(scales[r], want_s);
  }
}

TEST(Plan, Bf16DestinationsEqualReferenceLoad) { check_end_to_end(4, 2, false, 1, 0); }
TEST(Plan, Fp8DestinationsEqualReferenceLoad) { check_end_to_end(4, 2, true, 1, 3); }
TEST(Plan, Fp8FourDomainsThreeTrainers) { check_end_to_end(3, 2, true, 4, 1); }
TEST(Plan, OneTrainerOneInferenceRank) { check_end_to_end(1, 1, true, 2, 2); }

TEST(Plan, Fp8StagesOnlyBlocksThatStraddleShards) {
  Result<Schedule> bf = plan_schedule(model_trainers(4, 1), model_inference(2, false, 1));
  Result<Schedule> f8 = plan_schedule(model_trainers(4, 1), model_inference(2, true, 1));
  ASSERT_TRUE(bf.ok() && f8.ok());
  EXPECT_EQ(schedule_stats(*bf).staged_units, 0u);
  const ScheduleStats st = schedule_stats(*f8);
  EXPECT_GT(st.staged_units, 0u);
  EXPECT_GT(st.contributions, 0u);
  // Every staged box really gathers: at least two pieces (own rows or contributions) fill it.
  for (const TrainerPlan& g : f8->trainers) {
    for (const StagedUnit& u : g.staged) {
      const uint64_t end = u.staging_offset + u.box.elements() * element_size(u.source_dtype);
      size_t pieces = u.local_parts.size();
      for (const TrainerPlan& c : f8->trainers) {
        for (const Contribution& k : c.contributions) {
          const Target& t = c.targets[k.write.target];
          if (t.kind == Target::Kind::kTrainerStaging && t.rank == g.rank && k.write.dst_offset >= u.staging_offset &&
              k.write.dst_offset < end) {
            ++pieces;
          }
        }
      }
      EXPECT_GE(pieces, 2u) << "trainer " << g.rank << " box " << to_string(u.box);
    }
  }
  uint64_t gathered = 0;
  for (const TrainerPlan& p : f8->trainers) {
    for (uint64_t g : p.gather_imms) gathered += g;
  }
  EXPECT_GT(gathered, 0u);
}

TEST(Plan, DeterministicWhateverTheArrivalOrder) {
  auto t = model_trainers(4, 2);
  auto i = model_inference(2, true, 2);
  Result<Schedule> a = plan_schedule(t, i);
  std::mt19937 rng(5);
  std::shuffle(t.begin(), t.end(), rng);
  std::shuffle(i.begin(), i.end(), rng);
  Result<Schedule> b = plan_schedule(t, i);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(*a == *b);
  EXPECT_EQ(fingerprint(*a), fingerprint(*b));
  Result<Schedule> c = plan_schedule(t, model_inference(2, false, 2));
  ASSERT_TRUE(c.ok());
  EXPECT_NE(fingerprint(*a), fingerprint(*c));
}

TEST(Plan, ReplicasAreBalancedAcrossTrainers) {
  // HSDP: two replicas of an FSDP-2 layout (ranks 0,1 and 2,3 hold the same boxes).
  std::vector<TrainerMetadata> t;
  for (uint32_t r = 0; r < 4; ++r) {
    t.push_back({r, 4, fake_address("t" + std::to_string(r)), 1, trainer_layout(r % 2, 2).shards});
  }
  Result<Schedule> s = plan_schedule(t, model_inference(2, false, 1));
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  const ScheduleStats st = schedule_stats(*s);
  const uint64_t mx = *std::max_element(st.trainer_bytes.begin(), st.trainer_bytes.end());
  const uint64_t mn = *std::min_element(st.trainer_bytes.begin(), st.trainer_bytes.end());
  EXPECT_GT(mn, 0u);
  EXPECT_LE(static_cast<double>(mx) / mn, 1.1);
}

TEST(Plan, NicLoadsAreEven) {
  Result<Schedule> s = plan_schedule(model_trainers(4, 4), model_inference(2, true, 4));
  ASSERT_TRUE(s.ok());
  const ScheduleStats st = schedule_stats(*s);
  for (uint32_t t = 0; t < 4; ++t) {
    uint64_t mx = 0, sum = 0;
    for (uint32_t d = 0; d < 4; ++d) {
      mx = std::max(mx, st.trainer_nic_bytes[t * 4 + d]);
      sum += st.trainer_nic_bytes[t * 4 + d];
    }
    EXPECT_LE(static_cast<double>(mx) / (sum / 4.0), 1.35) << "trainer " << t;
  }
}

// --- validation: every error names the parameter ---------------------------------------------

void expect_error(std::vector<TrainerMetadata> t, std::vector<InferenceMetadata> i, const std::string& needle) {
  Result<Schedule> s = plan_schedule(std::move(t), std::move(i));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find(needle), std::string::npos) << s.status().message();
}

TEST(PlanErrors, MissingSourceParameter) {
  auto t = model_trainers(4, 1);
  for (auto& m : t) {
    std::erase_if(m.shards, [](const TrainerShard& s) { return s.name == "model.layers.0.self_attn.k_proj.weight"; });
  }
  expect_error(t, model_inference(2, false, 1), "no trainer holds parameter 'model.layers.0.self_attn.k_proj.weight'");
}

TEST(PlanErrors, ShapeAndDtypeMismatchBetweenTrainers) {
  auto t = model_trainers(4, 1);
  t[2].shards[0].global_shape[0] += 1;
  expect_error(t, model_inference(2, false, 1), "'" + t[2].shards[0].name + "': trainer rank 2 says shape");
  t = model_trainers(4, 1);
  t[1].shards[3].dtype = t[1].shards[3].dtype == DType::kBf16 ? DType::kF32 : DType::kBf16;
  expect_error(t, model_inference(2, false, 1), "'" + t[1].shards[3].name + "': trainer rank 1 says dtype");
}

TEST(PlanErrors, OverlappingOrMissingRows) {
  auto t = model_trainers(4, 1);
  t[1].shards[0].box.r0 -= 1;  // overlaps rank 0's rows
  expect_error(t, model_inference(2, false, 1), "parameter '" + t[1].shards[0].name + "'");
  t = model_trainers(4, 1);
  t[3].shards.erase(t[3].shards.begin());  // a hole
  expect_error(t, model_inference(2, false, 1), "nothing covers");
}

TEST(PlanErrors, InferenceSideProblems) {
  auto i = model_inference(2, true, 1);
  i[1].tensors[2].pieces[0].src.r1 += 100000;
  expect_error(model_trainers(4, 1), i, "inference rank 1 tensor '" + i[1].tensors[2].name + "'");
  i = model_inference(2, true, 1);
  i[0].regions[0] = fake_desc("small", 100, 1);
  expect_error(model_trainers(4, 1), i, "outside region 0");
  i = model_inference(2, true, 1);
  for (InferenceTensor& x : i[0].tensors) {
    if (x.name == "layers.0.self_attn.qkv_proj.weight") {  // k gets 64 rows: v starts off the grid
      x.pieces[1].src.r1 -= 64;
      x.pieces[2].dst_row -= 64;
      x.rows -= 64;
    }
  }
  expect_error(model_trainers(4, 1), i, "off the 128x128 block grid");
  i = model_inference(2, false, 1);
  for (auto& m : i) std::erase_if(m.tensors, [](const InferenceTensor& x) { return x.name == "norm.weight"; });
  expect_error(model_trainers(4, 1), i, "trainer parameter 'model.norm.weight' is not used");
  expect_error(model_trainers(4, 2), model_inference(2, false, 1), "domains");
}

}  // namespace
}  // namespace fabric_lib::weights::testing

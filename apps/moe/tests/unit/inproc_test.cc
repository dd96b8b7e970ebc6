// Whole steps with W ranks in one process (a thread and an engine each) over real providers:
// quick coverage of the protocol before the multi-process tests (tests/multiprocess_test.cc).
#include <gtest/gtest.h>

#include <barrier>
#include <thread>

#include "fabric_lib/fabric_lib.h"
#include "fabric_lib/moe/all_to_all.h"
#include "support/rank_runner.h"

namespace fabric_lib::moe {
namespace {

using testing::RunOptions;
using testing::StepReport;

MoeConfig base(uint32_t world) {
  MoeConfig c;
  c.max_num_tokens = 12;
  c.num_experts = 4 * world;
  c.experts_per_token = 3;
  c.hidden_dim = 64;
  c.hidden_dim_scale = 2;
  c.in_dtype = DType::kFp8E4M3;
  c.out_dtype = DType::kBf16;
  c.expert_padding = 4;
  c.world_size = world;
  c.max_private_tokens = 3;
  c.step_timeout = std::chrono::seconds(20);
  return c;
}

struct World {
  std::vector<std::unique_ptr<TransferEngine>> engines;
  std::vector<std::unique_ptr<AllToAll>> ranks;
  std::vector<Status> results;
  std::vector<std::vector<StepReport>> reports;
  // Ranks that completed their steps finish together, then every engine stops before any
  // buffer goes (a peer in this process may still be reading or writing them).
  ~World() {
    std::vector<std::thread> threads;
    for (size_t r = 0; r < ranks.size(); ++r) {
      if (r < results.size() && results[r].ok()) {
        threads.emplace_back([this, r] { EXPECT_TRUE(ranks[r]->finish(std::chrono::seconds(20)).ok()); });
      }
    }
    for (auto& t : threads) t.join();
    for (auto& e : engines) e->stop();
    ranks.clear();
  }
};

// Builds W engines and AllToAlls, connects them and runs `opts` on every rank in parallel.
void run_world(const MoeConfig& cfg, const std::string& provider, uint32_t domains, uint64_t reorder_seed,
               const RunOptions& opts, World& w) {
  const uint32_t W = cfg.world_size;
  std::vector<std::vector<uint8_t>> infos(W);
  for (uint32_t r = 0; r < W; ++r) {
    TransferEngineBuilder b;
    b.provider(provider).domains_per_group(domains).simulate_unordered_network(reorder_seed ? reorder_seed + r : 0);
    Result<std::unique_ptr<TransferEngine>> e = b.build();
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    w.engines.push_back(std::move(e).value());
    MoeConfig c = cfg;
    c.rank = r;
    Result<std::unique_ptr<AllToAll>> a = AllToAll::create(c, *w.engines.back());
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    infos[r] = (*a)->local_info();
    w.ranks.push_back(std::move(a).value());
  }
  for (uint32_t r = 0; r < W; ++r) ASSERT_TRUE(w.ranks[r]->connect(infos).ok());
  w.results.assign(W, ok_status());
  w.reports.assign(W, {});
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < W; ++r) {
    threads.emplace_back([&, r] {
      w.results[r] = testing::run_rank(*w.ranks[r], opts, [&, r](const StepReport& rep) { w.reports[r].push_back(rep); });
    });
  }
  for (auto& t : threads) t.join();
}

struct Case {
  uint32_t world;
  std::string provider;
  uint32_t domains;
  uint64_t reorder;
};

class InProcess : public ::testing::TestWithParam<Case> {};

TEST_P(InProcess, StepsMatchTheReference) {
  const Case& k = GetParam();
  RunOptions o;
  o.steps = 12;  // every routing kind three times, buffers reused each step
  World w;
  run_world(base(k.world), k.provider, k.domains, k.reorder, o, w);
  for (uint32_t r = 0; r < k.world; ++r) {
    EXPECT_TRUE(w.results[r].ok()) << "rank " << r << ": " << w.results[r].to_string();
    EXPECT_EQ(w.reports[r].size(), 12u);
    EXPECT_TRUE(w.ranks[r]->status().ok());
    // The step latency on the rank's engine's MetricsRegistry: one sample and one step per step.
    uint64_t steps = 0, samples = 0;
    double seconds = 0;
    for (const AppMetric& m : w.engines[r]->metrics().app) {
      if (m.name == "fabric_lib_moe_steps_total") steps += static_cast<uint64_t>(m.value);
      if (m.name == "fabric_lib_moe_step_seconds") samples += m.histogram.count, seconds += m.histogram.sum_seconds;
    }
    EXPECT_EQ(steps, 12u) << "rank " << r;
    EXPECT_EQ(samples, 12u) << "rank " << r;
    EXPECT_GT(seconds, 0) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Moe, InProcess,
                         ::testing::Values(Case{1, "tcp", 1, 0}, Case{2, "tcp", 1, 0}, Case{3, "tcp", 2, 0},
                                           Case{2, "shm", 1, 0}, Case{3, "tcp", 2, 11}),
                         [](const auto& info) {
                           return "w" + std::to_string(info.param.world) + "_" + info.param.provider + "_d" +
                                  std::to_string(info.param.domains) + (info.param.reorder ? "_reorder" : "");
                         });

TEST(InProcessFailure, OverflowPastCapacityFailsEveryRank) {
  MoeConfig c = base(2);
  c.max_private_tokens = 1;
  c.overflow_tokens = 2;  // the hot routing of step 1 sends far more
  RunOptions o;
  o.first_step = 1;
  o.steps = 1;
  o.vary_tokens = false;
  World w;
  run_world(c, "tcp", 1, 0, o, w);
  for (uint32_t r = 0; r < 2; ++r) {
    EXPECT_EQ(w.results[r].code(), ErrorCode::kResourceExhausted) << w.results[r].to_string();
    EXPECT_EQ(w.ranks[r]->status().code(), ErrorCode::kResourceExhausted);
    // Later calls return the failure too.
    EXPECT_EQ(w.ranks[r]->dispatch_send({}).code(), ErrorCode::kResourceExhausted);
  }
}

TEST(InProcessFailure, CallsOutOfOrderAreRefused) {
  TransferEngineBuilder b;
  Result<std::unique_ptr<TransferEngine>> e = b.provider("tcp").build();
  ASSERT_TRUE(e.ok());
  Result<std::unique_ptr<AllToAll>> a = AllToAll::create(base(1), **e);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ((*a)->dispatch_send({}).code(), ErrorCode::kFailedPrecondition);  // not connected
  std::vector<std::vector<uint8_t>> infos = {(*a)->local_info()};
  ASSERT_TRUE((*a)->connect(infos).ok());
  EXPECT_EQ((*a)->connect(infos).code(), ErrorCode::kFailedPrecondition);
  EXPECT_EQ((*a)->combine_recv({}).code(), ErrorCode::kFailedPrecondition);
  EXPECT_EQ((*a)->dispatch_recv({}).code(), ErrorCode::kFailedPrecondition);
  // A bad expert id is refused before anything is published; the step can then be issued.
  const uint32_t bad[3] = {0, 1, 99};
  uint8_t x[64] = {};
  float s[2] = {1, 1};
  DispatchSendArgs ds;
  ds.x = x;
  ds.x_stride = 64;
  ds.x_scale = s;
  ds.x_scale_stride_token = 2;
  ds.indices = bad;
  ds.indices_stride = 3;
  ds.num_tokens = 1;
  EXPECT_EQ((*a)->dispatch_send(ds).code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE((*a)->status().ok());
  const uint32_t good[3] = {0, 1, 2};
  ds.indices = good;
  EXPECT_TRUE((*a)->dispatch_send(ds).ok());
}

TEST(InProcessFailure, ConnectRefusesMismatchedInfos) {
  std::vector<std::unique_ptr<TransferEngine>> engines;
  std::vector<std::unique_ptr<AllToAll>> ranks;
  std::vector<std::vector<uint8_t>> infos;
  for (uint32_t r = 0; r < 2; ++r) {
    engines.push_back(std::move(TransferEngineBuilder().provider("tcp").build()).value());
    MoeConfig c = base(2);
    c.rank = r;
    if (r == 1) c.max_private_tokens = 4;  // disagrees
    ranks.push_back(std::move(AllToAll::create(c, *engines.back())).value());
    infos.push_back(ranks.back()->local_info());
  }
  Status s = ranks[0]->connect(infos);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("different MoE configuration"), std::string::npos) << s.message();
  std::swap(infos[0], infos[1]);
  EXPECT_EQ(ranks[0]->connect(infos).code(), ErrorCode::kInvalidArgument);
  infos[0].resize(10);
  EXPECT_EQ(ranks[1]->connect(infos).code(), ErrorCode::kMalformed);
}

}  // namespace
}  // namespace fabric_lib::moe

// EP 2, 4 and 8 as separate moe_rank processes over tcp, shm and the reordering wrapper: every
// step of every rank is checked against the reference inside the rank (rank_runner.cc); here we
// check that all steps of all ranks passed, that the ranks' combine digests add up to the
// reference digest of the whole batch (so outputs are bit-identical across EP sizes and runs),
// and that a killed (kill -9) or silent rank ends every other rank's step with an error in time.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <sstream>

#include "support/moe_reference.h"
#include "support/rank_process.h"

#ifndef MOE_RANK_BINARY
#error "MOE_RANK_BINARY must name the moe_rank executable"
#endif

namespace fabric_lib::moe::testing {
namespace {

using std::chrono::milliseconds;

constexpr uint32_t kGlobalTokens = 48;  // split over the ranks: 24, 12 or 6 each

struct Launch {
  uint32_t world = 2;
  std::string provider = "tcp";
  uint32_t domains = 1;
  uint64_t reorder = 0;
  uint32_t steps = 8;
  bool vary = false;
  uint32_t timeout_ms = 20000;
  int pause_rank = -1;
  uint32_t pause_step = 0;
  std::vector<std::string> extra;  // more key=value options
};

MoeConfig config_of(const Launch& l) {
  MoeConfig c;
  c.world_size = l.world;
  c.max_num_tokens = kGlobalTokens / l.world;
  c.num_experts = 32;
  c.experts_per_token = 4;
  c.hidden_dim = 128;
  c.hidden_dim_scale = 1;
  c.in_dtype = DType::kFp8E4M3;
  c.out_dtype = DType::kBf16;
  return c;
}

std::vector<std::string> args_of(const Launch& l, uint32_t rank) {
  const MoeConfig c = config_of(l);
  std::vector<std::string> a = {
      "rank=" + std::to_string(rank),       "world=" + std::to_string(l.world),
      "provider=" + l.provider,             "domains=" + std::to_string(l.domains),
      "reorder=" + std::to_string(l.reorder ? l.reorder + rank : 0),
      "steps=" + std::to_string(l.steps),   "seed=5",
      "tokens=" + std::to_string(c.max_num_tokens), "experts=32", "topk=4", "hidden=128", "scales=1",
      "dtype=fp8",                          "out=bf16",
      "vary=" + std::to_string(l.vary ? 1 : 0), "timeout_ms=" + std::to_string(l.timeout_ms)};
  if (static_cast<int>(rank) == l.pause_rank) a.push_back("pause=" + std::to_string(l.pause_step));
  for (const std::string& e : l.extra) a.push_back(e);
  return a;
}

struct RankOutcome {
  std::vector<std::string> lines;            // "step ..." lines
  std::map<uint64_t, uint64_t> digests;      // step -> digest
  bool done = false;
  std::optional<int> exit;
};

class Ranks {
 public:
  // Starts the ranks and connects them (info exchange through this test).
  ::testing::AssertionResult start(const Launch& l) {
    for (uint32_t r = 0; r < l.world; ++r) {
      procs_.push_back(std::make_unique<RankProcess>(MOE_RANK_BINARY, args_of(l, r)));
      if (!procs_.back()->started()) return ::testing::AssertionFailure() << "cannot start moe_rank";
    }
    std::string infos = "infos";
    for (uint32_t r = 0; r < l.world; ++r) {
      std::optional<std::string> line = procs_[r]->read_line(milliseconds(30000));
      if (!line || line->rfind("info ", 0) != 0) {
        return ::testing::AssertionFailure() << "rank " << r << " said: " << line.value_or("(nothing)");
      }
      infos += " " + line->substr(5);
    }
    for (auto& p : procs_) p->write_line(infos);
    for (uint32_t r = 0; r < l.world; ++r) {
      std::optional<std::string> line = procs_[r]->read_line(milliseconds(30000));
      if (line != "connected") return ::testing::AssertionFailure() << "rank " << r << ": " << line.value_or("(nothing)");
    }
    return ::testing::AssertionSuccess();
  }

  // Reads rank r's lines until "done", an error, end of file or `deadline`.
  RankOutcome& collect(uint32_t r, std::chrono::steady_clock::time_point deadline, bool stop_at_pause = false) {
    RankOutcome& o = outcomes_[r];
    while (true) {
      auto left = std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
      std::optional<std::string> line = procs_[r]->read_line(std::max(left, milliseconds(1)));
      if (!line) break;
      if (*line == "done") {
        o.done = true;
        break;
      }
      if (line->rfind("paused", 0) == 0) {
        o.lines.push_back(*line);
        if (stop_at_pause) break;
        continue;
      }
      o.lines.push_back(*line);
      std::istringstream in(*line);
      std::string word, verdict;
      uint64_t step = 0, digest = 0;
      in >> word >> step >> verdict >> digest;
      if (word == "step" && verdict == "ok") o.digests[step] = digest;
      if (verdict == "error") break;
    }
    return o;
  }
  RankProcess& proc(uint32_t r) { return *procs_[r]; }
  // Lets finished ranks exit (they wait so that none tears down while another still needs it).
  void release_all() {
    for (auto& p : procs_) p->write_line("exit");
  }
  std::string transcript(uint32_t r) {
    std::string s;
    for (const auto& l : outcomes_[r].lines) s += "\n    " + l;
    return s;
  }

 private:
  std::vector<std::unique_ptr<RankProcess>> procs_;
  std::map<uint32_t, RankOutcome> outcomes_;
};

// Sum of the reference digests of every rank's batch at `step` (not varying the token counts).
uint64_t reference_digest(const Launch& l, uint64_t step) {
  MoeConfig c = config_of(l);
  uint64_t sum = 0;
  for (uint32_t r = 0; r < l.world; ++r) {
    const TokenBatch b = make_tokens(c, 5, step, r * c.max_num_tokens, c.max_num_tokens);
    const std::vector<uint8_t> out = reference_combine(c, b);
    sum += rows_digest(out, size_t{c.hidden_dim} * 2, r * c.max_num_tokens, b.tokens);
  }
  return sum;
}

// Runs a launch to the end; returns the per-step sums of the ranks' digests.
std::map<uint64_t, uint64_t> run_all(const Launch& l) {
  Ranks ranks;
  EXPECT_TRUE(ranks.start(l));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  std::map<uint64_t, uint64_t> sums;
  for (uint32_t r = 0; r < l.world; ++r) {
    RankOutcome& o = ranks.collect(r, deadline);
    EXPECT_TRUE(o.done) << "rank " << r << " did not finish:" << ranks.transcript(r);
    EXPECT_EQ(o.digests.size(), l.steps) << ranks.transcript(r);
    for (const auto& [step, d] : o.digests) sums[step] += d;
  }
  ranks.release_all();
  for (uint32_t r = 0; r < l.world; ++r) EXPECT_EQ(ranks.proc(r).wait(milliseconds(30000)), std::optional<int>(0));
  return sums;
}

struct Matrix {
  uint32_t world;
  std::string provider;
  uint32_t domains;
  uint64_t reorder;
};

class MultiProcess : public ::testing::TestWithParam<Matrix> {};

TEST_P(MultiProcess, EveryStepMatchesTheReference) {
  Launch l;
  l.world = GetParam().world;
  l.provider = GetParam().provider;
  l.domains = GetParam().domains;
  l.reorder = GetParam().reorder;
  const std::map<uint64_t, uint64_t> sums = run_all(l);
  ASSERT_EQ(sums.size(), l.steps);
  for (const auto& [step, d] : sums) EXPECT_EQ(d, reference_digest(l, step)) << "step " << step;
}

INSTANTIATE_TEST_SUITE_P(Moe, MultiProcess,
                         ::testing::Values(Matrix{2, "tcp", 1, 0}, Matrix{4, "shm", 1, 0}, Matrix{8, "tcp", 1, 0},
                                           Matrix{4, "tcp", 2, 21}, Matrix{8, "shm", 1, 0}, Matrix{2, "tcp", 2, 33}),
                         [](const auto& info) {
                           return "ep" + std::to_string(info.param.world) + "_" + info.param.provider + "_d" +
                                  std::to_string(info.param.domains) + (info.param.reorder ? "_reorder" : "");
                         });

TEST(MultiProcessDeterminism, CombineIsBitIdenticalAcrossRunsAndEpSizes) {
  std::map<uint64_t, uint64_t> first;
  for (uint32_t world : {2u, 4u, 4u, 8u}) {
    Launch l;
    l.world = world;
    l.provider = "shm";
    l.steps = 4;
    const std::map<uint64_t, uint64_t> sums = run_all(l);
    ASSERT_EQ(sums.size(), 4u);
    if (first.empty()) {
      first = sums;
    } else {
      EXPECT_EQ(sums, first) << "EP" << world << " differs from EP2";
    }
  }
}

TEST(MultiProcessVaried, FewerTokensPaddingSmallPrivateSlotsAndLimitedOverflow) {
  Launch l;
  l.world = 4;
  l.vary = true;
  l.steps = 10;
  // P = 1: nearly every pair goes through the overflow writes; experts padded to 8 rows; some
  // ranks send half their tokens or none (bound_m).
  l.extra = {"private=1", "padding=8"};
  Ranks ranks;
  ASSERT_TRUE(ranks.start(l));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  for (uint32_t r = 0; r < l.world; ++r) {
    RankOutcome& o = ranks.collect(r, deadline);
    EXPECT_TRUE(o.done) << "rank " << r << ":" << ranks.transcript(r);
    EXPECT_EQ(o.digests.size(), l.steps);
  }
  ranks.release_all();
  for (uint32_t r = 0; r < l.world; ++r) EXPECT_EQ(ranks.proc(r).wait(milliseconds(30000)), std::optional<int>(0));
}

// `victim` stops after step `at`'s dispatch_send; killed (or left silent), every other rank must
// report a failed step within step_timeout plus slack, and exit. The failed step is `at` — or
// at - 1 when the kill also dropped the victim's last combine writes of step at - 1 (its tcp
// connections reset while a peer had not read them yet: a completed write is not a delivered one).
void check_failure(uint32_t world, uint32_t victim, uint32_t at, bool kill) {
  Launch l;
  l.world = world;
  l.steps = at + 2;
  l.timeout_ms = 3000;
  l.pause_rank = static_cast<int>(victim);
  l.pause_step = at;
  Ranks ranks;
  ASSERT_TRUE(ranks.start(l));
  const auto start = std::chrono::steady_clock::now();
  RankOutcome& v = ranks.collect(victim, start + std::chrono::seconds(60), /*stop_at_pause=*/true);
  ASSERT_FALSE(v.lines.empty());
  ASSERT_EQ(v.lines.back(), "paused " + std::to_string(at)) << ranks.transcript(victim);
  if (kill) ranks.proc(victim).kill_now();
  const auto t_fault = std::chrono::steady_clock::now();
  const auto bound = t_fault + milliseconds(l.timeout_ms) + std::chrono::seconds(8);
  for (uint32_t r = 0; r < world; ++r) {
    if (r == victim) continue;
    RankOutcome& o = ranks.collect(r, bound);
    ASSERT_FALSE(o.lines.empty()) << "rank " << r << " said nothing";
    const std::string want = "step " + std::to_string(at) + " error";
    const std::string before = "step " + std::to_string(at - 1) + " error";
    const bool at_step = o.lines.back().rfind(want, 0) == 0;
    const bool at_previous = kill && o.lines.back().rfind(before, 0) == 0;
    EXPECT_TRUE(at_step || at_previous) << "rank " << r << ":" << ranks.transcript(r);
    EXPECT_FALSE(o.done);
    EXPECT_EQ(o.digests.size(), at_step ? at - 1 : at - 2) << "rank " << r << " completed steps past the fault";
    EXPECT_EQ(ranks.proc(r).wait(std::chrono::duration_cast<milliseconds>(bound - std::chrono::steady_clock::now()) +
                                 milliseconds(1)),
              std::optional<int>(3))
        << "rank " << r << " did not exit after the failure";
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_fault).count();
  std::printf("[info] EP%u, rank %u %s at step %u: every other rank failed the step and exited %.2f s later\n", world,
              victim, kill ? "killed" : "silent", at, seconds);
}

TEST(MultiProcessFailure, KilledRankEndsEveryRanksStepEp4) { check_failure(4, 2, 3, true); }
TEST(MultiProcessFailure, KilledRankEndsEveryRanksStepEp8) { check_failure(8, 5, 2, true); }
TEST(MultiProcessFailure, SilentRankEndsEveryRanksStepEp2) { check_failure(2, 1, 2, false); }

}  // namespace
}  // namespace fabric_lib::moe::testing

// GPU tests of MoE dispatch/combine (run on the GPU machine by scripts/device-moe.sh): W
// moe_device_rank processes share the GPU(s) (rank r on GPU r % count), DeepSeek-V3 shapes,
// both paths (same-host direct IPC stores; forced through the proxy and the engine's ipc
// backend), every step checked against the host reference inside the ranks; CUDA-graph replays;
// bit-identical combine across runs and EP 1/2/4.
//   moe_device_tests [gtest flags]           the tests
//   moe_device_tests --bench OUT.csv         the benchmark (decode and prefill, both paths)
// MOE_RANK_WRAPPER (e.g. "compute-sanitizer --tool memcheck --error-exitcode 9 --log-file F")
// prefixes every rank's command line; the *MoeDeviceSanitized* tests run only when it is set.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include "support/rank_process.h"

#ifndef MOE_DEVICE_RANK_BINARY
#error "MOE_DEVICE_RANK_BINARY must name moe_device_rank"
#endif

namespace fabric_lib::moe::testing {
namespace {

using std::chrono::milliseconds;

struct Launch {
  uint32_t world = 2;
  std::string path = "proxy";
  std::string shape = "decode";
  std::string mode = "test";
  uint32_t steps = 4;
  uint32_t global_ranks = 0;  // 0: world (each rank M tokens); n: the batch of n ranks split over world
  std::vector<std::string> extra;
};

struct Outcome {
  bool done = false;
  std::map<uint64_t, uint64_t> digests;
  std::vector<std::string> lines;
};

int gpu_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0 ? n : 1;
}

std::vector<std::string> split_words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> w;
  for (std::string x; in >> x;) w.push_back(x);
  return w;
}

// Runs the ranks to the end; every rank's lines and digests.
std::vector<Outcome> run(const Launch& l, std::chrono::seconds budget = std::chrono::seconds(240)) {
  const char* wrapper = std::getenv("MOE_RANK_WRAPPER");
  const std::vector<std::string> wrap = wrapper ? split_words(wrapper) : std::vector<std::string>{};
  std::vector<std::unique_ptr<RankProcess>> procs;
  const int gpus = gpu_count();
  for (uint32_t r = 0; r < l.world; ++r) {
    std::vector<std::string> args = {
        "rank=" + std::to_string(r),  "world=" + std::to_string(l.world), "device=" + std::to_string(r % gpus),
        "path=" + l.path,             "shape=" + l.shape,                 "mode=" + l.mode,
        "steps=" + std::to_string(l.steps), "global_ranks=" + std::to_string(l.global_ranks ? l.global_ranks : l.world)};
    args.insert(args.end(), l.extra.begin(), l.extra.end());
    std::string bin = MOE_DEVICE_RANK_BINARY;
    if (!wrap.empty()) {
      std::vector<std::string> full(wrap.begin() + 1, wrap.end());
      full.push_back(bin);
      full.insert(full.end(), args.begin(), args.end());
      args = full;
      bin = wrap[0];
    }
    procs.push_back(std::make_unique<RankProcess>(bin, args));
  }
  std::vector<Outcome> out(l.world);
  const auto deadline = std::chrono::steady_clock::now() + budget;
  auto left = [&] { return std::max(milliseconds(1), std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now())); };
  std::string infos = "infos";
  for (uint32_t r = 0; r < l.world; ++r) {
    std::optional<std::string> line;
    do {
      line = procs[r]->read_line(left());
    } while (line && line->rfind("info ", 0) != 0 && line->rfind("error", 0) != 0);
    if (!line || line->rfind("info ", 0) != 0) {
      ADD_FAILURE() << "rank " << r << ": " << line.value_or("(nothing)");
      return out;
    }
    infos += " " + line->substr(5);
  }
  for (auto& p : procs) p->write_line(infos);
  for (uint32_t r = 0; r < l.world; ++r) {
    while (std::optional<std::string> line = procs[r]->read_line(left())) {
      out[r].lines.push_back(*line);
      if (*line == "done") {
        out[r].done = true;
        break;
      }
      std::istringstream in(*line);
      std::string word, verdict;
      uint64_t step = 0, digest = 0;
      in >> word >> step >> verdict >> digest;
      if (word == "step" && verdict == "ok") out[r].digests[step] = digest;
      if (verdict == "error" || word == "error") break;
    }
  }
  for (auto& p : procs) p->write_line("exit");
  // After a failed step a rank may never exit (a worker the watchdog gave up on is parked inside
  // the stuck call): wait a bounded grace, not the whole budget, then the destructor kills it.
  bool failed = false;
  for (const Outcome& o : out) failed |= !o.done;
  const milliseconds grace = failed ? std::min(left(), milliseconds(20000)) : left();
  for (uint32_t r = 0; r < l.world; ++r) {
    EXPECT_TRUE(out[r].done) << "rank " << r << " did not finish; last line: "
                             << (out[r].lines.empty() ? "(none)" : out[r].lines.back());
    EXPECT_EQ(procs[r]->wait(grace), std::optional<int>(0)) << "rank " << r;
  }
  return out;
}

std::map<uint64_t, uint64_t> digest_sums(const std::vector<Outcome>& out) {
  std::map<uint64_t, uint64_t> sums;
  for (const Outcome& o : out) {
    for (const auto& [step, d] : o.digests) sums[step] += d;
  }
  return sums;
}

struct Case {
  uint32_t world;
  std::string path, shape;
  uint32_t steps;
};

class MoeDevice : public ::testing::TestWithParam<Case> {};

TEST_P(MoeDevice, StepsMatchTheReference) {
  const Case& k = GetParam();
  Launch l;
  l.world = k.world;
  l.path = k.path;
  l.shape = k.shape;
  l.steps = k.steps;
  const std::vector<Outcome> out = run(l);
  for (const Outcome& o : out) EXPECT_EQ(o.digests.size(), k.steps);
}

INSTANTIATE_TEST_SUITE_P(DeepSeekV3, MoeDevice,
                         ::testing::Values(Case{2, "proxy", "decode", 4}, Case{4, "proxy", "decode", 4},
                                           Case{2, "direct", "decode", 4}, Case{4, "direct", "decode", 4},
                                           Case{4, "proxy", "prefill", 2}, Case{4, "direct", "prefill", 2}),
                         [](const auto& info) {
                           return info.param.shape + "_" + info.param.path + "_ep" + std::to_string(info.param.world);
                         });

TEST(MoeDeviceGraph, HundredReplaysProxyEp2) {
  Launch l;
  l.world = 2;
  l.mode = "graph";
  l.extra = {"replays=100"};
  const std::vector<Outcome> out = run(l);
  for (const Outcome& o : out) EXPECT_EQ(o.digests.size(), 12u);  // the eager step and 11 checked replays
}

TEST(MoeDeviceGraph, HundredReplaysDirectEp4) {
  Launch l;
  l.world = 4;
  l.path = "direct";
  l.mode = "graph";
  l.extra = {"replays=100"};
  const std::vector<Outcome> out = run(l);
  for (const Outcome& o : out) EXPECT_EQ(o.digests.size(), 12u);
}

TEST(MoeDeviceDeterminism, CombineBitIdenticalAcrossEp124BothPathsAndRuns) {
  std::map<uint64_t, uint64_t> first;
  const std::pair<uint32_t, const char*> runs[] = {{1, "proxy"}, {2, "proxy"}, {4, "proxy"}, {2, "direct"}, {4, "direct"}, {4, "proxy"}};
  for (const auto& [world, path] : runs) {
    Launch l;
    l.world = world;
    l.path = path;
    l.steps = 3;
    l.global_ranks = 4;  // the same 512-token batch every time
    const std::map<uint64_t, uint64_t> sums = digest_sums(run(l));
    ASSERT_EQ(sums.size(), 3u) << "EP" << world << " " << path;
    if (first.empty()) {
      first = sums;
    } else {
      EXPECT_EQ(sums, first) << "EP" << world << " " << path << " differs from EP1";
    }
  }
}

// Under compute-sanitizer (MOE_RANK_WRAPPER): the kernels of both paths with a small shape. EP 1
// needs no CUDA IPC between processes (which a sanitizer may not follow); EP 2 does.
struct Sanitized {
  uint32_t world;
  std::string path;
};
class MoeDeviceSanitized : public ::testing::TestWithParam<Sanitized> {};

TEST_P(MoeDeviceSanitized, SmallShape) {
  if (!std::getenv("MOE_RANK_WRAPPER")) GTEST_SKIP() << "set MOE_RANK_WRAPPER to a compute-sanitizer command";
  Launch l;
  l.world = GetParam().world;
  l.path = GetParam().path;
  l.shape = "small";
  l.steps = 2;
  l.extra = {"timeout_ms=60000"};
  const std::vector<Outcome> out = run(l, std::chrono::seconds(300));
  for (const Outcome& o : out) EXPECT_EQ(o.digests.size(), 2u);
}

INSTANTIATE_TEST_SUITE_P(Kernels, MoeDeviceSanitized,
                         ::testing::Values(Sanitized{1, "proxy"}, Sanitized{1, "direct"}, Sanitized{2, "proxy"},
                                           Sanitized{2, "direct"}),
                         [](const auto& info) { return info.param.path + "_ep" + std::to_string(info.param.world); });

int bench(const char* csv_path) {
  std::ofstream csv(csv_path);
  csv << "path,shape,world,rank,metric,p50,p99,samples\n";
  const std::pair<std::string, uint32_t> cases[] = {{"decode", 200}, {"prefill", 20}};
  int rc = 0;
  for (const auto& [shape, iterations] : cases) {
    for (const char* path : {"direct", "proxy"}) {
      for (uint32_t world : {2u, 4u}) {
        Launch l;
        l.world = world;
        l.path = path;
        l.shape = shape;
        l.mode = "bench";
        l.extra = {"iterations=" + std::to_string(iterations), "spin=1"};
        const std::vector<Outcome> out = run(l);
        double reaction = -1, floor = -1;
        for (uint32_t r = 0; r < out.size(); ++r) {
          if (!out[r].done) rc = 1;
          for (const std::string& line : out[r].lines) {
            if (line.rfind("csv,", 0) != 0) continue;
            csv << line.substr(4) << "\n";
            std::printf("%s\n", line.c_str() + 4);
            // path,shape,world,rank,metric,p50,p99,samples
            std::vector<std::string> f;
            std::stringstream ss(line.substr(4));
            for (std::string x; std::getline(ss, x, ',');) f.push_back(x);
            if (r == 0 && f.size() == 8 && f[4] == "proxy_reaction_us") reaction = std::atof(f[5].c_str());
            if (r == 0 && f.size() == 8 && f[4] == "clock_offset_uncertainty_us") floor = std::atof(f[5].c_str());
          }
        }
        if (reaction >= 0) {
          // Target: p50 <= 5 us (issue 16); the baseline measured in the same run is the one-way
          // GPU -> CPU flag latency of the clock calibration (half its round trip).
          std::printf("moe bench %s %s EP%u: proxy reaction p50 %.2f us (one-way flag floor %.2f us, ratio %.2f): %s\n",
                      shape.c_str(), path, world, reaction, floor, floor > 0 ? reaction / floor : 0.0,
                      reaction <= 5.0 ? "MET" : "MISSED");
        }
      }
    }
  }
  return rc;
}

}  // namespace
}  // namespace fabric_lib::moe::testing

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--bench") return fabric_lib::moe::testing::bench(argv[2]);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

// End to end, in separate processes: 4 trainers (FSDP over 4) -> 2 inference ranks (TP 2, experts
// EP 2) of the test model, the controller in the test process. Every destination byte and scale
// equals the single-process reference load, over ten steps of changing weights; the schedule is
// the same in every process and run; a trainer killed mid-step fails the step everywhere within
// its deadline; metadata errors reach every rank with the parameter's name.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <future>

#if FABRIC_LIB_HAVE_CUDA
#include <cuda_runtime.h>
#endif
#include <memory>

#include "fabric_lib/weights/weights.h"
#include "support/fixtures.h"
#include "weights_agent.h"

namespace fabric_lib::weights::testing {
namespace {

constexpr uint32_t kTrainers = 4, kInference = 2;
constexpr auto kReply = std::chrono::milliseconds(60000);

struct Config {
  std::string name, provider;
  size_t domains;
  bool fp8;
};
void PrintTo(const Config& c, std::ostream* os) { *os << c.name; }

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

// The controller (in this process) and the ranks (child processes), connected.
struct Cluster {
  std::unique_ptr<TransferEngine> engine;
  std::unique_ptr<Controller> controller;
  Result<Schedule> schedule = Status(ErrorCode::kInternal, "not run");
  std::vector<std::unique_ptr<WeightsAgent>> trainers, inference;
  std::vector<std::string> trainer_hello, inference_hello;

  Cluster(const Config& c, uint64_t step_timeout_ms, const std::string& trainer_variant = "normal",
          const std::string& inference_variant = "normal") {
    TransferEngineBuilder b;
    b.provider(c.provider).domains_per_group(c.domains);
    if (c.provider == "tcp") b.interfaces({"lo"});
    Result<std::unique_ptr<TransferEngine>> e = b.build();
    if (!e.ok()) {
      ADD_FAILURE() << e.status().to_string();
      return;
    }
    engine = std::move(*e);
    ControllerOptions o;
    o.trainers = kTrainers;
    o.inference = kInference;
    o.setup_timeout = std::chrono::seconds(60);
    controller = std::move(Controller::create(*engine, o).value());
    auto run = std::async(std::launch::async, [this] { return controller->run(); });
    for (uint32_t r = 0; r < kTrainers; ++r) {
      trainers.push_back(std::make_unique<WeightsAgent>(AgentSpec{"trainer", r, kTrainers, c.provider, c.domains, c.fp8,
                                                                  controller->address().to_hex(), step_timeout_ms, trainer_variant}));
    }
    for (uint32_t r = 0; r < kInference; ++r) {
      inference.push_back(std::make_unique<WeightsAgent>(AgentSpec{"inference", r, kInference, c.provider, c.domains, c.fp8,
                                                                   controller->address().to_hex(), step_timeout_ms, inference_variant}));
    }
    schedule = run.get();
    for (auto& t : trainers) trainer_hello.push_back(t->recv(kReply));
    for (auto& i : inference) inference_hello.push_back(i->recv(kReply));
  }

  // One step: every inference rank waits for `v`, every trainer sends it (trainer `partial` only
  // writes part of it and dies). Returns the replies, trainers first.
  // With `partial_first`, the dying trainer is gone before the others start.
  std::vector<std::string> step(uint64_t v, uint64_t wait_ms, int partial = -1, bool partial_first = false) {
    std::string first;
    if (partial >= 0 && partial_first) {
      trainers[partial]->send("partial " + std::to_string(v));
      first = trainers[partial]->recv(kReply);
      trainers[partial]->wait_exit(std::chrono::seconds(10));
    }
    for (auto& i : inference) i->send("wait " + std::to_string(v) + " " + std::to_string(wait_ms));
    for (uint32_t r = 0; r < trainers.size(); ++r) {
      if (static_cast<int>(r) == partial && partial_first) continue;
      trainers[r]->send((static_cast<int>(r) == partial ? "partial " : "send ") + std::to_string(v));
    }
    std::vector<std::string> replies;
    for (uint32_t r = 0; r < trainers.size(); ++r) {
      replies.push_back(static_cast<int>(r) == partial && partial_first ? first : trainers[r]->recv(kReply));
    }
    for (auto& i : inference) replies.push_back(i->recv(kReply));
    return replies;
  }
};

class WeightsTransfer : public ::testing::TestWithParam<Config> {};

TEST_P(WeightsTransfer, TenStepsEveryByteEqualsTheReferenceLoad) {
  const Config& c = GetParam();
  Cluster cl(c, 20000);
  ASSERT_TRUE(cl.schedule.ok()) << cl.schedule.status().to_string();
  // The same schedule in every process, and as planned here from the same metadata.
  Result<Schedule> local = plan_schedule(model_trainers(kTrainers, c.domains), model_inference(kInference, c.fp8, c.domains));
  ASSERT_TRUE(local.ok());
  EXPECT_TRUE(*local == *cl.schedule);
  const std::string want = "connected " + std::to_string(fingerprint(*local));
  for (const std::string& h : cl.trainer_hello) ASSERT_EQ(h, want);
  for (const std::string& h : cl.inference_hello) ASSERT_EQ(h, want);
  const ScheduleStats st = schedule_stats(*local);
  EXPECT_EQ(st.staged_units > 0, c.fp8);
  for (uint64_t v = 1; v <= 10; ++v) {
    const std::vector<std::string> replies = cl.step(v, 20000);
    for (uint32_t r = 0; r < kTrainers; ++r) {
      ASSERT_TRUE(starts_with(replies[r], "ok ")) << "step " << v << " trainer " << r << ": " << replies[r];
      // Bytes written by the trainer equal the schedule's.
      EXPECT_EQ(std::stoull(tools::split_words(replies[r])[1]), st.trainer_bytes[r]) << "trainer " << r;
      EXPECT_LE(std::stoull(tools::split_words(replies[r])[3]), uint64_t{1} << 20) << "watermark";
      // The trainer's step metrics (MetricsRegistry): one ok step and one sample per stage each time.
      const std::vector<std::string> w = tools::split_words(replies[r]);
      ASSERT_EQ(w.size(), 7u) << replies[r];
      EXPECT_EQ(std::stoull(w[4]), v) << "fabric_lib_weights_steps_total{outcome=ok}, trainer " << r;
      EXPECT_EQ(std::stoull(w[5]), v) << "fabric_lib_weights_step_seconds{stage=total} samples, trainer " << r;
      EXPECT_EQ(std::stoull(w[6]), v) << "fabric_lib_weights_step_seconds{stage=write_wait} samples, trainer " << r;
    }
    for (uint32_t r = 0; r < kInference; ++r) ASSERT_EQ(replies[kTrainers + r], "ok") << "step " << v << " inference " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Providers, WeightsTransfer,
                         ::testing::Values(Config{"tcp_1dom_fp8", "tcp", 1, true}, Config{"tcp_4dom_bf16", "tcp", 4, false},
                                           Config{"shm_1dom_bf16", "shm", 1, false}, Config{"shm_4dom_fp8", "shm", 4, true},
                                           Config{"ipc_2dom_fp8_host", "ipc", 2, true}),
                         [](const auto& info) { return info.param.name; });

#if FABRIC_LIB_HAVE_CUDA
// GPU machine (scripts/device-weights.sh): shards and destinations in GPU memory, prepare on
// the GPU (H2D-free: shards already on the device; cast and fp8 kernels), over the same-host
// same-host IPC backend.
class WeightsTransferGpu : public ::testing::TestWithParam<Config> {};

TEST_P(WeightsTransferGpu, TenStepsEveryByteEqualsTheReferenceLoad) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    GTEST_SKIP() << "no usable CUDA device here: scripts/device-weights.sh runs it on the GPU machine";
  }
  const Config& c = GetParam();
  Cluster cl(c, 20000, "gpu", "gpu");
  ASSERT_TRUE(cl.schedule.ok()) << cl.schedule.status().to_string();
  for (const std::string& h : cl.trainer_hello) ASSERT_TRUE(starts_with(h, "connected ")) << h;
  for (const std::string& h : cl.inference_hello) ASSERT_TRUE(starts_with(h, "connected ")) << h;
  for (uint64_t v = 1; v <= 10; ++v) {
    const std::vector<std::string> replies = cl.step(v, 20000);
    for (uint32_t r = 0; r < kTrainers; ++r) ASSERT_TRUE(starts_with(replies[r], "ok ")) << "step " << v << " trainer " << r << ": " << replies[r];
    for (uint32_t r = 0; r < kInference; ++r) ASSERT_EQ(replies[kTrainers + r], "ok") << "step " << v << " inference " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Gpu, WeightsTransferGpu,
                         ::testing::Values(Config{"ipc_1dom_fp8", "ipc", 1, true}, Config{"ipc_2dom_bf16", "ipc", 2, false}),
                         [](const auto& info) { return info.param.name; });
#endif

class WeightsFailure : public ::testing::TestWithParam<Config> {};

// Mid-step: the victim writes part of its share and dies while the others run (kill_first:
// before they start, so their writes to it fail at once).
void kill_test(const Config& config, bool kill_first) {
  constexpr uint64_t kTimeoutMs = 3000;
  Cluster cl(config, kTimeoutMs);
  ASSERT_TRUE(cl.schedule.ok()) << cl.schedule.status().to_string();
  std::vector<std::string> ok = cl.step(1, 20000);
  for (const std::string& r : ok) ASSERT_TRUE(r == "ok" || starts_with(r, "ok ")) << r;
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<std::string> replies = cl.step(2, kTimeoutMs, /*partial=*/2, kill_first);
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(replies[2], "dying");
  if (!kill_first) {
    const int status = cl.trainers[2]->wait_exit(std::chrono::seconds(10));
    ASSERT_NE(status, -1);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  }
  for (size_t r = 0; r < replies.size(); ++r) {
    std::printf("  after the kill, rank reply %zu: %.160s\n", r, replies[r].c_str());
    if (replies[r] == "<no reply>") {  // say how it died
      WeightsAgent& a = r < kTrainers ? *cl.trainers[r] : *cl.inference[r - kTrainers];
      const int st = a.wait_exit(std::chrono::seconds(5));
      ADD_FAILURE() << "rank reply " << r << ": the process ended, wait status " << st << " (signal "
                    << (st != -1 && WIFSIGNALED(st) ? WTERMSIG(st) : 0) << ")";
    }
    if (r == 2) continue;
    EXPECT_TRUE(starts_with(replies[r], "error ")) << "rank reply " << r << " reported " << replies[r];
  }
  // Every side ended by its deadline (plus the slack of process scheduling on a busy machine).
  EXPECT_LT(elapsed, kTimeoutMs / 1000.0 + 5.0);
}

TEST_P(WeightsFailure, TrainerKilledMidStepFailsTheStepEverywhere) { kill_test(GetParam(), false); }
TEST_P(WeightsFailure, TrainerKilledBeforeOthersStartFailsTheStepEverywhere) { kill_test(GetParam(), true); }

INSTANTIATE_TEST_SUITE_P(Providers, WeightsFailure,
                         ::testing::Values(Config{"tcp_2dom_fp8", "tcp", 2, true}, Config{"shm_1dom_fp8", "shm", 1, true}),
                         [](const auto& info) { return info.param.name; });

TEST(WeightsErrors, MetadataMismatchReachesEveryRankNamingTheParameter) {
  {
    Cluster cl(Config{"tcp", "tcp", 1, false}, 5000, "normal", "missing_source");
    ASSERT_FALSE(cl.schedule.ok());
    EXPECT_EQ(cl.schedule.status().code(), ErrorCode::kInvalidArgument);
    const std::string needle = "_MISSING'";
    EXPECT_NE(cl.schedule.status().message().find(needle), std::string::npos) << cl.schedule.status().message();
    for (const std::string& h : cl.trainer_hello) EXPECT_TRUE(starts_with(h, "connect-error invalid_argument") && h.find(needle) != std::string::npos) << h;
    for (const std::string& h : cl.inference_hello) EXPECT_TRUE(starts_with(h, "connect-error invalid_argument") && h.find(needle) != std::string::npos) << h;
  }
  {
    Cluster cl(Config{"tcp", "tcp", 1, true}, 5000, "bad_shape", "normal");
    ASSERT_FALSE(cl.schedule.ok());
    EXPECT_NE(cl.schedule.status().message().find("trainer rank 1 says shape"), std::string::npos) << cl.schedule.status().message();
    for (const std::string& h : cl.trainer_hello) EXPECT_TRUE(h.find("trainer rank 1 says shape") != std::string::npos) << h;
  }
}

}  // namespace
}  // namespace fabric_lib::weights::testing

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "--weights-agent") == 0) {
    return fabric_lib::weights::testing::run_weights_agent(argc - 2, argv + 2);
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

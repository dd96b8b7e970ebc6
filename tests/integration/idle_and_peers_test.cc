// The worker's idle policy and pinning, and peers that are forgotten and come back.
#include <dirent.h>
#include <sched.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <sstream>

#include "integration/engine_fixture.h"

namespace fabric_lib::testing {
namespace {

using IdleAndPeersTest = EngineTest;

// This process's threads: id and name. Earlier tests in the same process may have left threads
// behind — a worker stuck for good inside a provider call (shm after a kill -9, FailureTest),
// which spins and is named like any group's worker (docs/failure-semantics.md) — so the tests
// below look only at threads that were not there before them.
struct ThreadInfo {
  pid_t tid;
  std::string name;
};

std::vector<ThreadInfo> this_process_threads() {
  std::vector<ThreadInfo> out;
  DIR* dir = opendir("/proc/self/task");
  if (!dir) return out;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream comm(std::string("/proc/self/task/") + e->d_name + "/comm");
    std::string n;
    std::getline(comm, n);
    out.push_back({static_cast<pid_t>(std::stoi(e->d_name)), n});
  }
  closedir(dir);
  return out;
}

std::set<pid_t> thread_ids() {
  std::set<pid_t> ids;
  for (const ThreadInfo& t : this_process_threads()) ids.insert(t.tid);
  return ids;
}

// Ids of the threads named `name` that are not in `before`.
std::vector<pid_t> new_threads_named(const std::string& name, const std::set<pid_t>& before) {
  std::vector<pid_t> out;
  for (const ThreadInfo& t : this_process_threads()) {
    if (t.name == name && !before.count(t.tid)) out.push_back(t.tid);
  }
  return out;
}

// CPU seconds (user + system) the threads not in `before` have used so far (/proc's stat fields
// 14 and 15, in clock ticks); the calling thread counts too when it is not in `before`.
double cpu_seconds_of_new_threads(const std::set<pid_t>& before) {
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  double seconds = 0;
  for (const ThreadInfo& t : this_process_threads()) {
    if (before.count(t.tid)) continue;
    std::ifstream stat("/proc/self/task/" + std::to_string(t.tid) + "/stat");
    std::string line;
    std::getline(stat, line);
    // The name (field 2) is in parentheses and may hold spaces: fields are counted after it.
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    std::string field;
    unsigned long long utime = 0, stime = 0;
    for (int f = 3; f <= 15 && rest >> field; ++f) {
      if (f == 14) utime = std::stoull(field);
      if (f == 15) stime = std::stoull(field);
    }
    seconds += static_cast<double>(utime + stime) / tick;
  }
  return seconds;
}

// An idle engine's wake-ups (the back-off naps on providers without a CQ fd) cost several times
// more CPU under a sanitizer: TSan on 2 busy cores measured 5.6 %.
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr double kIdleCpuLimit = 0.15;
#else
constexpr double kIdleCpuLimit = 0.05;
#endif

// An idle engine with the adaptive policy (the default) uses almost no CPU, even after traffic.
TEST_P(IdleAndPeersTest, IdleAdaptiveEngineUsesNearlyNoCpu) {
  std::set<pid_t> before = thread_ids();
  before.erase(static_cast<pid_t>(gettid()));  // this thread's time counts
  Outcomes first(1), later(1);  // before the engine, which may call them until stopped
  AgentProcess agent(GetParam(), 1 << 20);
  ASSERT_TRUE(agent.started());
  auto engine = make_engine();
  ASSERT_TRUE(engine);
  SourceBuffer src(*engine, 1 << 20, 81);
  ASSERT_TRUE(engine->submit_write({src.reg.handle, 0, agent.desc(), 0, 1 << 20, 3}, first.sink(0)).ok());
  ASSERT_TRUE(first.all_ok());
  // The measurement: the idle policy's spin budget is spent, then a second of idle CPU time.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const double start = cpu_seconds_of_new_threads(before);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const double used = cpu_seconds_of_new_threads(before) - start;
  EXPECT_LT(used, kIdleCpuLimit) << "an idle engine used " << used * 100 << "% of a core";
  // And it still wakes up for new work.
  ASSERT_TRUE(engine->submit_write({src.reg.handle, 0, agent.desc(), 0, 4096, 4}, later.sink(0)).ok());
  EXPECT_TRUE(later.all_ok());
  EXPECT_EQ(agent.expect_exactly(4, 1), "ok");
}

// pin_worker() pins the group's worker thread (named fl-worker-<group>) to that CPU.
TEST_P(IdleAndPeersTest, PinnedWorkerRunsOnItsCpu) {
  const int cpu = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)) - 1;
  const std::set<pid_t> before = thread_ids();
  auto engine = GetParam().builder().pin_worker(0, cpu).build();
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  auto tids = new_threads_named("fl-worker-0", before);
  ASSERT_EQ(tids.size(), 1u);
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(tids[0], sizeof(set), &set), 0);
  EXPECT_EQ(CPU_COUNT(&set), 1);
  EXPECT_TRUE(CPU_ISSET(cpu, &set));
}

// A forgotten peer is inserted again by the next request to it, which then lands.
TEST_P(IdleAndPeersTest, ForgottenPeerIsReinsertedOnNextUse) {
  Outcomes out(2);  // before the engine, which may call it until stopped
  AgentProcess agent(GetParam(), 8192);
  ASSERT_TRUE(agent.started());
  auto engine = make_engine();
  ASSERT_TRUE(engine);
  SourceBuffer src(*engine, 8192, 82);
  ASSERT_TRUE(engine->submit_write({src.reg.handle, 0, agent.desc(), 0, 4096, 5}, out.sink(0)).ok());
  ASSERT_TRUE(out.wait_for_request(0, bounds::kRequests));
  ASSERT_TRUE(engine->forget_peer(agent.desc()).ok());
  ASSERT_TRUE(engine->submit_write({src.reg.handle, 4096, agent.desc(), 4096, 4096, 5}, out.sink(1)).ok());
  EXPECT_TRUE(out.all_ok());
  EXPECT_EQ(agent.expect_exactly(5, 2), "ok");
  EXPECT_EQ(agent.hash(0, 8192), hash_hex(src.bytes.data(), 8192));
}

// record_submit_latency(true) yields one submit-to-first-post sample and one posting time (to the
// last WR posted) per request; off, none.
TEST_P(IdleAndPeersTest, SubmitLatenciesAreRecordedWhenAsked) {
  AgentProcess agent(GetParam(), 8192);
  ASSERT_TRUE(agent.started());
  for (bool on : {true, false}) {
    Outcomes out(101);  // before the engine, which may call it until stopped
    auto engine = GetParam().builder().record_submit_latency(on).build();
    ASSERT_TRUE(engine.ok());
    SourceBuffer src(**engine, 8192, 83);
    for (size_t i = 0; i < 100; ++i) {
      ASSERT_TRUE((*engine)->submit_write({src.reg.handle, 0, agent.desc(), 0, 64}, out.sink(i)).ok());
    }
    EXPECT_TRUE(out.wait_until(100, bounds::kRequests));
    auto samples = (*engine)->take_submit_latencies_ns();
    auto posting = (*engine)->take_posting_times_ns();
    EXPECT_EQ(samples.size(), on ? 100u : 0u);
    ASSERT_EQ(posting.size(), samples.size());
    for (size_t i = 0; i < samples.size(); ++i) {
      EXPECT_LT(samples[i], 1'000'000'000u);  // each well under a second
      // One WR each: its first post is its last, the posting time read after the first-post one.
      EXPECT_GE(posting[i], samples[i]) << "request " << i;
    }
    EXPECT_TRUE((*engine)->take_submit_latencies_ns().empty());  // taken means cleared
    EXPECT_TRUE((*engine)->take_posting_times_ns().empty());
    // A request of several WRs: one sample of each kind, not one per WR or per posting call.
    ScatterRequest scatter{src.reg.handle};
    for (uint64_t t = 0; t < 8; ++t) scatter.targets.push_back({64, t * 64, t * 64, agent.desc(), 0});
    ASSERT_TRUE((*engine)->submit_scatter(std::move(scatter), out.sink(100)).ok());
    EXPECT_TRUE(out.all_ok());
    EXPECT_EQ((*engine)->take_submit_latencies_ns().size(), on ? 1u : 0u);
    EXPECT_EQ((*engine)->take_posting_times_ns().size(), on ? 1u : 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Matrix, IdleAndPeersTest, ::testing::ValuesIn(provider_matrix()), matrix_name);

}  // namespace
}  // namespace fabric_lib::testing

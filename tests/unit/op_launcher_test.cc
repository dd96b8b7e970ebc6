// The copy engine's launcher (gpu/op_launcher.h), without a GPU: ops run in order on the
// launcher's thread, a failed op's group is skipped up to and including its last op (and the
// next group runs), run_inline() keeps the same rules on the caller's thread (with a failure
// state of its own), a launcher that
// went to sleep is woken by every push (thousands of sleep/push rounds, none lost), a full
// queue makes push() wait, the destructor runs what was queued, at_start runs first on the
// launcher's thread, and a group after a failed group whose end never came runs.
#include "gpu/op_launcher.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace fabric_lib::gpu {
namespace {

struct TestOp {
  uint64_t group = 0;
  bool last = false;
  uint64_t id = 0;
  bool fails = false;
};

struct RecordingIssuer {
  int issue(const TestOp& op, bool on_launcher) {
    std::lock_guard lock(mu);
    on_launcher_flags.push_back(on_launcher);
    issued.push_back(op.id);
    threads.push_back(std::this_thread::get_id());
    return op.fails ? 7 : 0;
  }
  void failed(const TestOp& op, int code, bool) {
    std::lock_guard lock(mu);
    failures.push_back({op.id, code});
  }
  std::mutex mu;
  std::vector<uint64_t> issued;
  std::vector<std::thread::id> threads;
  std::vector<bool> on_launcher_flags;
  std::vector<std::pair<uint64_t, int>> failures;
};

template <typename L>
bool wait_idle(const L& launcher) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!launcher.idle()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

TEST(OpLauncher, RunsEveryOpInOrderOnItsOwnThread) {
  RecordingIssuer issuer;
  OpLauncher<TestOp, RecordingIssuer> launcher(64, &issuer);
  constexpr uint64_t kOps = 100000;
  for (uint64_t i = 0; i < kOps; ++i) launcher.push({i / 10, i % 10 == 9, i, false});
  ASSERT_TRUE(wait_idle(launcher)) << "ops not run within 20 s";
  std::lock_guard lock(issuer.mu);
  ASSERT_EQ(issuer.issued.size(), kOps);
  for (uint64_t i = 0; i < kOps; ++i) ASSERT_EQ(issuer.issued[i], i);
  for (const std::thread::id& t : issuer.threads) ASSERT_NE(t, std::this_thread::get_id());
  for (const bool on_launcher : issuer.on_launcher_flags) ASSERT_TRUE(on_launcher);
  EXPECT_TRUE(issuer.failures.empty());
}

TEST(OpLauncher, AFailedOpSkipsTheRestOfItsGroupAndTheNextGroupRuns) {
  RecordingIssuer issuer;
  OpLauncher<TestOp, RecordingIssuer> launcher(8, &issuer);
  launcher.push({1, false, 10, false});
  launcher.push({1, false, 11, true});   // fails: 12 and the group's end 13 are skipped
  launcher.push({1, false, 12, false});
  launcher.push({1, true, 13, false});
  launcher.push({2, false, 20, false});  // the next group runs
  launcher.push({2, true, 21, true});    // a failing last op: reported, nothing to skip
  launcher.push({3, true, 30, false});
  ASSERT_TRUE(wait_idle(launcher));
  std::lock_guard lock(issuer.mu);
  EXPECT_EQ(issuer.issued, (std::vector<uint64_t>{10, 11, 20, 21, 30}));
  ASSERT_EQ(issuer.failures.size(), 2u);
  EXPECT_EQ(issuer.failures[0], (std::pair<uint64_t, int>{11, 7}));
  EXPECT_EQ(issuer.failures[1], (std::pair<uint64_t, int>{21, 7}));
}

TEST(OpLauncher, RunInlineRunsOnTheCallersThreadWithTheSameRules) {
  RecordingIssuer issuer;
  OpLauncher<TestOp, RecordingIssuer> launcher(8, &issuer);
  launcher.push({1, true, 1, false});
  ASSERT_TRUE(wait_idle(launcher));
  launcher.run_inline({2, false, 2, true});  // fails inline: 3 and the group's end 4 are skipped
  launcher.run_inline({2, false, 3, false});
  launcher.run_inline({2, true, 4, false});
  launcher.run_inline({5, true, 5, false});
  std::lock_guard lock(issuer.mu);
  EXPECT_EQ(issuer.issued, (std::vector<uint64_t>{1, 2, 5}));
  ASSERT_EQ(issuer.threads.size(), 3u);
  EXPECT_NE(issuer.threads[0], std::this_thread::get_id());
  EXPECT_EQ(issuer.threads[1], std::this_thread::get_id());
  EXPECT_EQ(issuer.threads[2], std::this_thread::get_id());
  EXPECT_EQ(issuer.on_launcher_flags, (std::vector<bool>{true, false, false}));
}

// Inline groups run beside queued ones (other streams): a failure on one side skips only its own
// group, whatever runs on the other side meanwhile.
TEST(OpLauncher, InlineAndQueuedFailuresAreKeptApart) {
  RecordingIssuer issuer;
  OpLauncher<TestOp, RecordingIssuer> launcher(8, &issuer);
  launcher.push({1, false, 10, true});  // the launcher fails group 1: its end 11 is skipped
  ASSERT_TRUE(wait_idle(launcher));
  launcher.run_inline({2, false, 20, false});  // an inline group meanwhile: runs whole
  launcher.run_inline({2, true, 21, false});
  launcher.push({1, true, 11, false});
  launcher.push({3, true, 30, false});
  ASSERT_TRUE(wait_idle(launcher));
  std::lock_guard lock(issuer.mu);
  EXPECT_EQ(issuer.issued, (std::vector<uint64_t>{10, 20, 21, 30}));
  ASSERT_EQ(issuer.failures.size(), 1u);
}

TEST(OpLauncher, WithoutAThreadEveryPushRunsAtOnceWithTheSameRules) {
  RecordingIssuer issuer;
  OpLauncher<TestOp, RecordingIssuer> launcher(8, &issuer, std::chrono::microseconds(50), false);
  EXPECT_FALSE(launcher.threaded());
  launcher.push({1, false, 1, true});  // fails: 2 skipped
  EXPECT_EQ(issuer.issued, (std::vector<uint64_t>{1}));
  launcher.push({1, true, 2, false});
  launcher.push({2, true, 3, false});
  EXPECT_TRUE(launcher.idle());
  EXPECT_EQ(issuer.issued, (std::vector<uint64_t>{1, 3}));
  for (const std::thread::id& t : issuer.threads) EXPECT_EQ(t, std::this_thread::get_id());
  ASSERT_EQ(issuer.failures.size(), 1u);
}

// A group cut short (its failed op had no end queued after it, as when the producer gave up on
// it) does not swallow the next group.
TEST(OpLauncher, AGroupAfterAFailedGroupWithoutItsEndRuns) {
  RecordingIssuer issuer;
  OpLauncher<TestOp, RecordingIssuer> launcher(8, &issuer);
  launcher.push({1, false, 1, true});  // fails; group 1's end never comes
  launcher.push({2, false, 2, false});
  launcher.push({2, true, 3, false});
  ASSERT_TRUE(wait_idle(launcher));
  std::lock_guard lock(issuer.mu);
  EXPECT_EQ(issuer.issued, (std::vector<uint64_t>{1, 2, 3}));
  ASSERT_EQ(issuer.failures.size(), 1u);
}

TEST(OpLauncher, AtStartRunsOnTheLaunchersThreadBeforeAnyOp) {
  RecordingIssuer issuer;
  std::thread::id started;
  std::atomic<int> starts{0};
  OpLauncher<TestOp, RecordingIssuer> launcher(8, &issuer, std::chrono::microseconds(50), true, [&] {
    started = std::this_thread::get_id();
    starts.fetch_add(1, std::memory_order_release);
  });
  launcher.push({1, true, 1, false});
  ASSERT_TRUE(wait_idle(launcher));
  EXPECT_EQ(starts.load(std::memory_order_acquire), 1);
  std::lock_guard lock(issuer.mu);
  ASSERT_EQ(issuer.threads.size(), 1u);
  EXPECT_EQ(issuer.threads[0], started);
  EXPECT_NE(started, std::this_thread::get_id());
}

// With no spin the launcher goes to sleep after every op: each push must wake it.
TEST(OpLauncher, EveryPushWakesASleepingLauncher) {
  RecordingIssuer issuer;
  OpLauncher<TestOp, RecordingIssuer> launcher(8, &issuer, std::chrono::microseconds(0));
  constexpr uint64_t kRounds = 5000;
  for (uint64_t i = 0; i < kRounds; ++i) {
    launcher.push({i, true, i, false});
    ASSERT_TRUE(wait_idle(launcher)) << "round " << i << ": a push did not wake the launcher";
  }
  std::lock_guard lock(issuer.mu);
  EXPECT_EQ(issuer.issued.size(), kRounds);
}

// An issuer held until the test lets it go.
struct GatedIssuer {
  int issue(const TestOp& op, bool) {
    while (!open.load(std::memory_order_acquire)) std::this_thread::yield();
    issued.fetch_add(1, std::memory_order_relaxed);
    last_id.store(op.id, std::memory_order_relaxed);
    return 0;
  }
  void failed(const TestOp&, int, bool) {}
  std::atomic<bool> open{false};
  std::atomic<uint64_t> issued{0};
  std::atomic<uint64_t> last_id{0};
};

TEST(OpLauncher, AFullQueueMakesPushWaitAndTheDestructorRunsWhatIsQueued) {
  GatedIssuer issuer;
  std::atomic<uint64_t> pushed{0};
  {
    OpLauncher<TestOp, GatedIssuer> launcher(4, &issuer);
    std::thread producer([&] {
      for (uint64_t i = 1; i <= 100; ++i) {
        launcher.push({i, true, i, false});
        pushed.store(i, std::memory_order_release);
      }
    });
    // Blocked issuer: the op it holds stays in its slot until it returns, so 4 pushes fill the
    // queue and the fifth waits — however long the producer keeps trying.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (pushed.load(std::memory_order_acquire) < 4 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    EXPECT_EQ(pushed.load(), 4u);
    uint64_t most = 0;
    for (int i = 0; i < 2000; ++i) {
      most = std::max(most, pushed.load(std::memory_order_acquire));
      std::this_thread::yield();
    }
    issuer.open.store(true, std::memory_order_release);
    producer.join();
    EXPECT_EQ(most, 4u) << "push() did not wait for room";
  }  // the destructor runs what is still queued
  EXPECT_EQ(issuer.issued.load(), 100u);
  EXPECT_EQ(issuer.last_id.load(), 100u);
}

// Ops still queued when the destructor starts are run before it returns: the issuer is held
// while the destructor begins, so they are queued then (most rounds; whichever way the race
// goes, none may be lost).
TEST(OpLauncher, TheDestructorRunsOpsQueuedWhenItStarts) {
  for (int round = 0; round < 20; ++round) {
    GatedIssuer issuer;
    auto launcher = std::make_unique<OpLauncher<TestOp, GatedIssuer>>(8, &issuer);
    for (uint64_t i = 1; i <= 5; ++i) launcher->push({i, true, i, false});
    std::atomic<bool> destroying{false};
    std::thread destroyer([&] {
      destroying.store(true, std::memory_order_release);
      launcher.reset();
    });
    while (!destroying.load(std::memory_order_acquire)) std::this_thread::yield();
    for (int i = 0; i < 1000; ++i) std::this_thread::yield();  // let the destructor begin
    issuer.open.store(true, std::memory_order_release);
    destroyer.join();
    ASSERT_EQ(issuer.issued.load(), 5u) << "round " << round;
    ASSERT_EQ(issuer.last_id.load(), 5u) << "round " << round;
  }
}

}  // namespace
}  // namespace fabric_lib::gpu

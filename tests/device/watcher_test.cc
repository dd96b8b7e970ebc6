// UVM watcher on the GPU: a kernel publishes one value per "layer" (busy wait in between), launched
// directly and captured in a CUDA graph and replayed; the callback sees increasing values that end
// at each launch's last layer, every time. Watchers can go while others run, and callbacks submit.
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "device_support.h"
#include "kernels.h"

namespace fabric_lib::device_tests {
namespace {

using namespace std::chrono_literals;

constexpr int kLayers = 32;
constexpr uint32_t kLayerNs = 20'000;  // 20 us of "compute" per layer
constexpr int kRounds = 5;

struct Seen {
  std::mutex mu;
  std::vector<std::pair<uint64_t, uint64_t>> pairs;
  std::atomic<uint64_t> last{0};
  WatchCallback callback() {
    return [this](uint64_t old_value, uint64_t new_value) {
      std::lock_guard lock(mu);
      pairs.emplace_back(old_value, new_value);
      last.store(new_value, std::memory_order_release);
      return true;
    };
  }
  bool wait_for(uint64_t value, std::chrono::milliseconds timeout = 10s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (last.load(std::memory_order_acquire) != value) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(50us);
    }
    return true;
  }
};

// Every callback's old value is the previous new one, values only grow, and each round ended at
// its last layer. Returns how many of the rounds' values were seen (coalescing may skip some).
size_t check_rounds(Seen& seen, int rounds, const char* what) {
  std::lock_guard lock(seen.mu);
  uint64_t prev = 0;
  size_t values = 0;
  std::vector<bool> round_end_seen(rounds, false);
  for (auto [old_value, new_value] : seen.pairs) {
    EXPECT_EQ(old_value, prev) << what;
    EXPECT_GT(new_value, old_value) << what << ": values must only grow";
    prev = new_value;
    ++values;
    if (new_value % kLayers == 0 && new_value / kLayers >= 1 && new_value / kLayers <= static_cast<uint64_t>(rounds)) {
      round_end_seen[new_value / kLayers - 1] = true;
    }
  }
  for (int r = 0; r < rounds; ++r) EXPECT_TRUE(round_end_seen[r]) << what << ": round " << r << " never showed its last layer";
  EXPECT_EQ(prev, static_cast<uint64_t>(rounds) * kLayers) << what;
  return values;
}

class UvmWatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    engine_ = build_engine(TransferEngineBuilder().provider("tcp").interfaces({"lo"}).idle_policy(IdlePolicy::kSpin));
    ASSERT_TRUE(engine_);
    FL_CUDA_ASSERT(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  void TearDown() override {
    if (stream_) cudaStreamDestroy(stream_);
  }
  std::unique_ptr<TransferEngine> engine_;
  cudaStream_t stream_ = nullptr;
};

TEST_F(UvmWatcherTest, DirectLaunchesReachTheCallbackInOrder) {
  Seen seen;
  Result<UvmWatcher> w = engine_->alloc_uvm_watcher(seen.callback());
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  ASSERT_NE(w->device_ptr(), nullptr);
  DeviceBuffer epoch(sizeof(uint64_t));
  FL_CUDA_ASSERT(cudaMemset(epoch.ptr, 0, sizeof(uint64_t)));
  for (int r = 0; r < kRounds; ++r) {
    FL_KERNEL_ASSERT(launch_layer_bumps(w->device_ptr(), static_cast<uint64_t*>(epoch.ptr), kLayers, kLayerNs, stream_));
    FL_CUDA_ASSERT(cudaStreamSynchronize(stream_));
    ASSERT_TRUE(seen.wait_for(static_cast<uint64_t>(r + 1) * kLayers)) << "round " << r << ", last " << seen.last.load();
  }
  const size_t values = check_rounds(seen, kRounds, "direct");
  std::printf("[ info ] direct launches: the callback saw %zu of %d values\n", values, kRounds * kLayers);
  EXPECT_EQ(w->value(), static_cast<uint64_t>(kRounds) * kLayers);
}

TEST_F(UvmWatcherTest, GraphReplaysReachTheCallbackInOrder) {
  Seen seen;
  Result<UvmWatcher> w = engine_->alloc_uvm_watcher(seen.callback());
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  DeviceBuffer epoch(sizeof(uint64_t));
  FL_CUDA_ASSERT(cudaMemset(epoch.ptr, 0, sizeof(uint64_t)));
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  FL_CUDA_ASSERT(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  FL_KERNEL_ASSERT(launch_layer_bumps(w->device_ptr(), static_cast<uint64_t*>(epoch.ptr), kLayers, kLayerNs, stream_));
  FL_CUDA_ASSERT(cudaStreamEndCapture(stream_, &graph));
  FL_CUDA_ASSERT(cudaGraphInstantiate(&exec, graph, 0));
  for (int r = 0; r < kRounds; ++r) {
    FL_CUDA_ASSERT(cudaGraphLaunch(exec, stream_));
    FL_CUDA_ASSERT(cudaStreamSynchronize(stream_));
    ASSERT_TRUE(seen.wait_for(static_cast<uint64_t>(r + 1) * kLayers)) << "replay " << r << ", last " << seen.last.load();
  }
  // Back to back, without waiting in between: the values still only grow and end right.
  for (int r = kRounds; r < 2 * kRounds; ++r) FL_CUDA_ASSERT(cudaGraphLaunch(exec, stream_));
  FL_CUDA_ASSERT(cudaStreamSynchronize(stream_));
  ASSERT_TRUE(seen.wait_for(static_cast<uint64_t>(2 * kRounds) * kLayers));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  const size_t values = check_rounds(seen, 2 * kRounds, "graph");
  std::printf("[ info ] graph replays: the callback saw %zu of %d values\n", values, 2 * kRounds * kLayers);
}

TEST_F(UvmWatcherTest, FreeingOneWatcherWhileAnotherRuns) {
  Seen kept, freed;
  Result<UvmWatcher> a = engine_->alloc_uvm_watcher(kept.callback());
  Result<UvmWatcher> b = engine_->alloc_uvm_watcher(freed.callback());
  ASSERT_TRUE(a.ok() && b.ok());
  uint64_t* b_device = b->device_ptr();
  DeviceBuffer epochs(2 * sizeof(uint64_t));
  FL_CUDA_ASSERT(cudaMemset(epochs.ptr, 0, 2 * sizeof(uint64_t)));
  auto* epoch = static_cast<uint64_t*>(epochs.ptr);
  FL_KERNEL_ASSERT(launch_layer_bumps(a->device_ptr(), epoch, kLayers, kLayerNs, stream_));
  FL_KERNEL_ASSERT(launch_layer_bumps(b_device, epoch + 1, kLayers, kLayerNs, stream_));
  FL_CUDA_ASSERT(cudaStreamSynchronize(stream_));
  ASSERT_TRUE(kept.wait_for(kLayers));
  ASSERT_TRUE(freed.wait_for(kLayers));
  b->reset();  // from this thread: its callback has run for the last time when this returns
  const size_t calls_at_free = freed.pairs.size();
  // A late kernel may still write the freed word (it stays mapped); nobody is called for it.
  for (int r = 1; r < kRounds; ++r) {
    FL_KERNEL_ASSERT(launch_layer_bumps(a->device_ptr(), epoch, kLayers, kLayerNs, stream_));
    FL_KERNEL_ASSERT(launch_layer_bumps(b_device, epoch + 1, kLayers, kLayerNs, stream_));
  }
  FL_CUDA_ASSERT(cudaStreamSynchronize(stream_));
  ASSERT_TRUE(kept.wait_for(static_cast<uint64_t>(kRounds) * kLayers));
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(freed.pairs.size(), calls_at_free);
  check_rounds(kept, kRounds, "kept watcher");
}

TEST_F(UvmWatcherTest, CallbacksSubmitTransfersAsLayersFinish) {
  // The KV-transfer pattern: each finished layer triggers a write (here: an imm) to a peer.
  const testing::ProviderConfig config = provider_config("tcp", 1);
  testing::AgentProcess agent(config, 4096);
  ASSERT_TRUE(agent.started());
  const MrDesc peer = agent.desc();
  std::atomic<uint64_t> submitted{0}, refused{0};
  TransferEngine* engine = engine_.get();
  Result<UvmWatcher> w = engine_->alloc_uvm_watcher([&, engine](uint64_t old_value, uint64_t new_value) {
    for (uint64_t layer = old_value + 1; layer <= new_value; ++layer) {  // coalesced layers each get theirs
      (engine->submit_imm(77, peer, Completion()).ok() ? submitted : refused).fetch_add(1);
    }
    return true;
  });
  ASSERT_TRUE(w.ok());
  DeviceBuffer epoch(sizeof(uint64_t));
  FL_CUDA_ASSERT(cudaMemset(epoch.ptr, 0, sizeof(uint64_t)));
  FL_KERNEL_ASSERT(launch_layer_bumps(w->device_ptr(), static_cast<uint64_t*>(epoch.ptr), kLayers, kLayerNs, stream_));
  FL_CUDA_ASSERT(cudaStreamSynchronize(stream_));
  EXPECT_TRUE(agent.expect_imms(77, kLayers, 20s));
  EXPECT_EQ(submitted.load(), static_cast<uint64_t>(kLayers));
  EXPECT_EQ(refused.load(), 0u);
}

}  // namespace
}  // namespace fabric_lib::device_tests

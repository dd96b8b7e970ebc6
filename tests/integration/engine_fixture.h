// Shared pieces of the integration tests: the provider matrix fixture, a patterned and
// registered source buffer, and a local shadow of what a target region should hold.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "common/pattern.h"
#include "support/bounds.h"
#include "support/outcomes.h"
#include "support/peer_agent.h"

namespace fabric_lib::testing {

class EngineTest : public ::testing::TestWithParam<ProviderConfig> {
 protected:
  std::unique_ptr<TransferEngine> make_engine() {
    auto engine = GetParam().builder().build();
    EXPECT_TRUE(engine.ok()) << engine.status().to_string();
    return engine.ok() ? std::move(engine).value() : nullptr;
  }
  size_t domains() const { return GetParam().domains; }
  bool reordered() const { return GetParam().reorder_seed != 0; }

  // The reordering wrapper is on exactly when the configuration asks for it: on tcp_reordered it
  // shuffled windows of WRs and held events back, in the writer's engine and (given) the agent's,
  // elsewhere both counters are 0. Call after traffic of many WRs (a burst, paged or sharded
  // writes): with one event in three held back, 64 events without a hold happen once in 10^11.
  void expect_reordering_as_configured(TransferEngine& engine, AgentProcess* agent = nullptr) {
    const EngineStats st = engine.stats();
    if (reordered()) {
      EXPECT_GT(st.unordered_windows_shuffled, 0u) << "the reordering wrapper shuffled no window";
      EXPECT_GT(st.unordered_events_held, 0u) << "the reordering wrapper held no event back";
    } else {
      EXPECT_EQ(st.unordered_windows_shuffled + st.unordered_events_held, 0u) << "reordering without being asked";
    }
    if (!agent) return;
    const AgentProcess::Stats at = agent->stats();
    if (reordered()) {
      EXPECT_GT(at.unordered_events_held, 0u) << "the target's reordering wrapper held no imm back";
    } else {
      EXPECT_EQ(at.unordered_windows_shuffled + at.unordered_events_held, 0u) << "the target reorders without being asked";
    }
  }
};

// A patterned host buffer registered with an engine.
struct SourceBuffer {
  std::vector<uint8_t> bytes;
  MrRegistration reg;

  SourceBuffer(TransferEngine& engine, size_t size, uint64_t seed, Access access = Access::kLocalOnly)
      : bytes(size) {
    tools::fill_pattern(bytes.data(), size, seed);
    auto r = engine.register_memory(bytes.data(), size, access);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    if (r.ok()) reg = *r;
  }
};

// Stops an engine when it goes out of scope. Declare it after the buffers a test's requests
// use: a request that ended by deadline or by a failed path may still have WRs reading them
// until the engine stops (docs/failure-semantics.md).
class StopEngineFirst {
 public:
  explicit StopEngineFirst(TransferEngine* engine) : engine_(engine) {}
  ~StopEngineFirst() {
    if (engine_) engine_->stop();
  }
  StopEngineFirst(const StopEngineFirst&) = delete;
  StopEngineFirst& operator=(const StopEngineFirst&) = delete;

 private:
  TransferEngine* engine_;
};

// What the target region should contain after the writes a test issued.
struct Shadow {
  std::vector<uint8_t> bytes;
  explicit Shadow(size_t size) : bytes(size, 0) {}
  void write(const SourceBuffer& src, uint64_t src_offset, uint64_t dst_offset, uint64_t length) {
    std::memcpy(bytes.data() + dst_offset, src.bytes.data() + src_offset, length);
  }
  std::string hash() const { return hash_hex(bytes.data(), bytes.size()); }
};

inline std::string matrix_name(const ::testing::TestParamInfo<ProviderConfig>& info) { return info.param.name; }

// Waits for a counter to reach n; fails the test on timeout. (A shared counter cannot see a
// duplicate completion: tests of request outcomes use Outcomes, support/outcomes.h.)
inline void wait_all(const CompletionCounter& c, uint64_t n, std::chrono::milliseconds timeout = bounds::kRequests) {
  ASSERT_TRUE(c.wait_for(n, timeout)) << "only " << c.finished() << " of " << n << " requests completed";
}

}  // namespace fabric_lib::testing

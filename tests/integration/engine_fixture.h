// Shared pieces of the integration tests: the provider matrix fixture, a patterned and
// registered source buffer, and a local shadow of what a target region should hold.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "common/pattern.h"
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

// Waits for a counter to reach n; fails the test on timeout.
inline void wait_all(const CompletionCounter& c, uint64_t n, std::chrono::seconds timeout = std::chrono::seconds(120)) {
  ASSERT_TRUE(c.wait_for(n, std::chrono::duration_cast<std::chrono::milliseconds>(timeout)))
      << "only " << c.finished() << " of " << n << " requests completed";
}

}  // namespace fabric_lib::testing

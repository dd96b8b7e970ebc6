// Shared by the ipc device tests: the fixture (domains per group as the parameter), GPU
// sources with a host copy of their bytes, the host shadow of a target region, and the copy
// mode override.
#pragma once

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/pattern.h"
#include "device_support.h"
#include "ipc_agent.h"

namespace fabric_lib::device_tests {

class IpcGpuTest : public ::testing::TestWithParam<size_t> {
 protected:
  size_t domains() const { return GetParam(); }
  testing::ProviderConfig config() const { return ipc_config(domains()); }
  // An engine on GPU 0 (its GPU sources live there).
  std::unique_ptr<TransferEngine> make_engine(TransferEngineBuilder builder) {
    cudaSetDevice(0);
    return build_engine(std::move(builder));
  }
  std::unique_ptr<TransferEngine> make_engine() { return make_engine(config().builder()); }
};

// GPU memory on the current device holding pattern `seed` (its host copy in `host`), registered
// local-only. The destructor stops the engine first: requests may still read the memory.
struct GpuSource {
  GpuSource(TransferEngine& engine, size_t bytes, uint64_t seed) : engine(&engine), host(bytes), device(bytes) {
    tools::fill_pattern(host.data(), bytes, seed);
    if (!device.ptr || cudaMemcpy(device.ptr, host.data(), bytes, cudaMemcpyHostToDevice) != cudaSuccess) return;
    Result<MrRegistration> r = engine.register_memory(device.ptr, bytes, Access::kLocalOnly, MemoryKind::kCuda);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    if (r.ok()) reg = *r;
  }
  ~GpuSource() { engine->stop(); }
  bool ok() const { return reg.handle.valid(); }

  TransferEngine* engine;
  std::vector<uint8_t> host;
  DeviceBuffer device;
  MrRegistration reg;
};

// What a target region should hold after the writes a test issued.
struct Shadow {
  explicit Shadow(size_t size) : bytes(size, 0) {}
  void write(const uint8_t* src, uint64_t dst_offset, uint64_t length) { std::memcpy(bytes.data() + dst_offset, src, length); }
  std::string hash() const { return testing::hash_hex(bytes.data(), bytes.size()); }
  std::vector<uint8_t> bytes;
};

// Sets FABRIC_LIB_NVLINK_COPY for engines built in the scope (read when a domain first meets GPU
// memory), and clears it after.
struct CopyModeScope {
  explicit CopyModeScope(const char* mode) { setenv("FABRIC_LIB_NVLINK_COPY", mode, 1); }
  ~CopyModeScope() { unsetenv("FABRIC_LIB_NVLINK_COPY"); }
};

}  // namespace fabric_lib::device_tests

namespace fabric_lib::testing {
// Waits for a counter to reach n; fails the test on timeout.
inline void wait_all_of(const CompletionCounter& c, uint64_t n, std::chrono::seconds timeout = std::chrono::seconds(120)) {
  ASSERT_TRUE(c.wait_for(n, std::chrono::duration_cast<std::chrono::milliseconds>(timeout)))
      << "only " << c.finished() << " of " << n << " requests completed";
}
}  // namespace fabric_lib::testing

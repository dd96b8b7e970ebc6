// Shared by the GPU tests and benchmarks: CUDA memory with RAII, engines and peer agents for the
// providers the GPU machine runs (tcp over loopback, shm).
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "fabric_lib/fabric_lib.h"
#include "support/peer_agent.h"

namespace fabric_lib::device_tests {

#define FL_CUDA_ASSERT(expr)                                                          \
  do {                                                                                \
    const cudaError_t _fl_e = (expr);                                                 \
    ASSERT_EQ(_fl_e, cudaSuccess) << #expr << ": " << cudaGetErrorString(_fl_e);      \
  } while (0)
#define FL_KERNEL_ASSERT(expr)                                                        \
  do {                                                                                \
    const int _fl_e = (expr);                                                         \
    ASSERT_EQ(_fl_e, 0) << #expr << ": " << error_text(_fl_e);                        \
  } while (0)

// cudaMalloc'd bytes.
struct DeviceBuffer {
  explicit DeviceBuffer(size_t n) : size(n) {
    if (cudaMalloc(&ptr, n) != cudaSuccess) ptr = nullptr;
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  uint8_t* bytes() const { return static_cast<uint8_t*>(ptr); }
  void* ptr = nullptr;
  size_t size = 0;
};

// Mapped pinned host bytes: a network target the GPU can read (host()) and kernels reach (device()).
struct MappedBuffer {
  explicit MappedBuffer(size_t n) : size(n) {
    if (cudaHostAlloc(&host_ptr, n, cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess) host_ptr = nullptr;
    if (host_ptr && cudaHostGetDevicePointer(&device_ptr, host_ptr, 0) != cudaSuccess) device_ptr = nullptr;
  }
  ~MappedBuffer() { cudaFreeHost(host_ptr); }
  MappedBuffer(const MappedBuffer&) = delete;
  MappedBuffer& operator=(const MappedBuffer&) = delete;
  uint8_t* host() const { return static_cast<uint8_t*>(host_ptr); }
  uint8_t* device() const { return static_cast<uint8_t*>(device_ptr); }
  void* host_ptr = nullptr;
  void* device_ptr = nullptr;
  size_t size = 0;
};

// tcp over loopback or shm, `domains` per group.
inline testing::ProviderConfig provider_config(const std::string& provider, size_t domains) {
  const bool tcp = provider == "tcp";
  return {provider + "_" + std::to_string(domains) + "dom", provider, tcp ? "lo" : "", domains, 0};
}

inline std::unique_ptr<TransferEngine> build_engine(TransferEngineBuilder builder) {
  Result<std::unique_ptr<TransferEngine>> e = builder.build();
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  return e.ok() ? std::move(e).value() : nullptr;
}

// Hex FNV-1a of device bytes (copied to the host), matching AgentProcess::hash.
std::string device_hash_hex(const void* device_ptr, size_t n);

}  // namespace fabric_lib::device_tests

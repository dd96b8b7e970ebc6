// DeviceGuard: makes a CUDA device current for a scope (CUDA builds only).
#pragma once

#include <cuda_runtime_api.h>

namespace fabric_lib::gpu {

// Makes `device` current for the scope and restores the caller's device after.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  cudaError_t status() const { return status_; }

 private:
  int previous_ = -1;
  cudaError_t status_ = cudaSuccess;
};

}  // namespace fabric_lib::gpu

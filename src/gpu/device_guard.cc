#include "gpu/device_guard.h"

namespace fabric_lib::gpu {

DeviceGuard::DeviceGuard(int device) {
  if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
  // Always set, even when cudaGetDevice already names `device`: on a thread that never used CUDA
  // (the group worker) it answers 0 with no context current, and driver calls made through the
  // runtime's entry points (cuMemGetAddressRange) then fail with CUDA_ERROR_INVALID_CONTEXT.
  // cudaSetDevice makes the device's primary context current (CUDA 12+).
  status_ = cudaSetDevice(device);
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0 && status_ == cudaSuccess) cudaSetDevice(previous_);
}

}  // namespace fabric_lib::gpu

// What the staging decorator (staging_domain.h) needs from CUDA, as an interface so its logic runs,
// and is tested, without a GPU: pinned host memory for bounce buffers, the device owning a GPU
// pointer, and a CopyEngine (gpu/copy_engine.h) for the device-to-host copies.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "fabric_lib/status.h"
#include "gpu/copy_engine.h"

namespace fabric_lib::transport::staging {

class StagingGpu {
 public:
  virtual ~StagingGpu() = default;
  // Page-locked host memory (the DMA engine copies into it directly).
  virtual Result<void*> alloc_pinned(size_t bytes) = 0;
  virtual void free_pinned(void* p) = 0;
  // The CUDA device that owns GPU memory at `ptr` (the copies run on its streams).
  virtual Result<int> device_of(const void* ptr) = 0;
  virtual gpu::CopyEngine& copies() = 0;
};

// Makes it when a domain first stages (CUDA is initialised only then).
using StagingGpuFactory = std::function<Result<std::unique_ptr<StagingGpu>>()>;

// The CUDA implementation (CUDA builds; Unsupported otherwise, or without a device).
StagingGpuFactory cuda_staging_gpu_factory();

}  // namespace fabric_lib::transport::staging

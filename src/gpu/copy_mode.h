// How CudaCopyEngine issues small GPU-to-GPU copies (cuda_copy_engine.h). Plain C++, so the
// builder can parse the setting in builds without CUDA.
#pragma once

#include <cstdint>

namespace fabric_lib::gpu {

enum class GpuCopyMode : uint8_t {
  kAuto,    // kernel for batches of small GPU-to-GPU copies, cudaMemcpyAsync otherwise
  kMemcpy,  // one cudaMemcpyAsync per copy
  kBatch,   // small copies through cudaMemcpyBatchAsync
  kKernel,  // small copies through the page-copy kernel (same as kAuto)
};
// "auto", "memcpy", "batch", "kernel"; false for anything else.
bool parse_gpu_copy_mode(const char* text, GpuCopyMode* out);
const char* gpu_copy_mode_name(GpuCopyMode mode);

}  // namespace fabric_lib::gpu

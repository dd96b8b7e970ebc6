// How CudaCopyEngine issues small GPU-to-GPU copies (cuda_copy_engine.h). Plain C++, so the
// builder can parse the setting in builds without CUDA.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fabric_lib::gpu {

enum class GpuCopyMode : uint8_t {
  kAuto,    // kernel for batches of small GPU-to-GPU copies, cudaMemcpyAsync otherwise
  kMemcpy,  // one cudaMemcpyAsync per copy
  kBatch,   // small copies through cudaMemcpyBatchAsync
  kKernel,  // small copies through the page-copy kernel (same as kAuto)
};
// A flush of at least this many copies (a gather's pages, each other copy one) is issued by the
// copy engine's launcher thread by default (cuda_copy_engine.h; docs/gpu.md has the A/B: the
// thread pays where the worker's own work per flush is large — thousands of small pages — and
// costs where it is not).
inline constexpr size_t kDefaultLauncherCopies = 2048;
// 16-byte loads a lane of the page-copy kernel keeps in flight (4 or 8). Eight since 2026-12-05:
// a 4 KiB page is then one trip to memory instead of two; the A/B on one H100 (docs/gpu.md, "The
// page-copy kernel's shape, measured") read 0-5 % more, and steadier, for 4096 x 4 KiB requests
// and the same at 256 KiB.
inline constexpr uint32_t kDefaultCopyLoadsPerLane = 8;

// How the IPC backend's CudaCopyEngine issues copies, as the builder sets it.
struct GpuCopySettings {
  GpuCopyMode mode = GpuCopyMode::kAuto;
  // Flushes of at least this many copies go to the launcher thread; 0: no launcher thread
  // (every flush is issued on the group's worker).
  size_t launcher_copies = kDefaultLauncherCopies;
  // The page-copy kernel's shape (CudaCopyEngine::Options; diagnosis only, set by the
  // environment: FABRIC_LIB_IPC_LAUNCH_WARPS, FABRIC_LIB_IPC_COPY_LOADS; docs/gpu.md).
  size_t min_launch_warps = 0;
  uint32_t loads_per_lane = kDefaultCopyLoadsPerLane;
  // Streams per device the copies spread over (CudaCopyEngine::Options::streams_per_device;
  // diagnosis only, set by the environment: FABRIC_LIB_IPC_COPY_STREAMS, 1 to 16).
  size_t streams_per_device = 4;
};

// "auto", "memcpy", "batch", "kernel"; false for anything else.
bool parse_gpu_copy_mode(const char* text, GpuCopyMode* out);
const char* gpu_copy_mode_name(GpuCopyMode mode);

}  // namespace fabric_lib::gpu

#include "gpu/copy_mode.h"

#include <cstring>

namespace fabric_lib::gpu {

bool parse_gpu_copy_mode(const char* text, GpuCopyMode* out) {
  if (!text) return false;
  const struct {
    const char* name;
    GpuCopyMode mode;
  } kModes[] = {{"auto", GpuCopyMode::kAuto}, {"memcpy", GpuCopyMode::kMemcpy}, {"batch", GpuCopyMode::kBatch},
                {"kernel", GpuCopyMode::kKernel}};
  for (const auto& m : kModes) {
    if (std::strcmp(text, m.name) == 0) {
      *out = m.mode;
      return true;
    }
  }
  return false;
}

const char* gpu_copy_mode_name(GpuCopyMode mode) {
  switch (mode) {
    case GpuCopyMode::kAuto: return "auto";
    case GpuCopyMode::kMemcpy: return "memcpy";
    case GpuCopyMode::kBatch: return "batch";
    case GpuCopyMode::kKernel: return "kernel";
  }
  return "?";
}

}  // namespace fabric_lib::gpu

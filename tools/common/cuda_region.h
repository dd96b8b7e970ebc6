// GPU memory as a tools::Region (CUDA builds): cudaMalloc'd on one device, the region starting
// `offset` bytes into its allocation (an odd offset exercises IPC export of sub-allocations).
#pragma once

#include <cstddef>
#include <memory>

#include "common/region.h"

namespace fabric_lib::tools {

// The GPU that peer processes of the device tests and fabric-bench use: 1 when there are two or
// more GPUs (GPU0 <-> GPU1), else 0 (processes sharing GPU 0).
int peer_gpu();

Result<std::unique_ptr<Region>> make_cuda_region(size_t bytes, int device, size_t offset_in_allocation = 0);

}  // namespace fabric_lib::tools

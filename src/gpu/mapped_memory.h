// 64-bit words in mapped pinned host memory, for UVM watchers and GPU-visible flags. Words come
// from a process-wide slab of cudaHostAlloc'd pages, one word per 64-byte line (so a GPU write to
// one never shares a cache line with another that the CPU polls). Pages are kept for reuse for
// the life of the process: freeing a word never unmaps memory a late kernel might still touch.
#pragma once

#include <cstdint>

#include "fabric_lib/status.h"

namespace fabric_lib::gpu {

struct MappedSlot {
  uint64_t* host = nullptr;    // CPU address
  uint64_t* device = nullptr;  // address for kernels (cudaHostGetDevicePointer)
};

#if FABRIC_LIB_HAVE_CUDA
// A zeroed word. Unsupported without a usable CUDA device.
Result<MappedSlot> alloc_mapped_slot();
// Returns the word to the slab (zeroed again). Null slots are ignored.
void free_mapped_slot(const MappedSlot& slot);
#else
inline Result<MappedSlot> alloc_mapped_slot() {
  return unsupported("mapped GPU-visible memory needs a CUDA build of fabric-lib (this one was built with "
                     "FABRIC_LIB_CUDA=OFF or without nvcc)");
}
inline void free_mapped_slot(const MappedSlot&) {}
#endif

}  // namespace fabric_lib::gpu

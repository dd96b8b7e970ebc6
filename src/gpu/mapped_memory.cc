// CUDA builds only: the slab behind alloc_mapped_slot().
#include "gpu/mapped_memory.h"

#include <cuda_runtime_api.h>

#include <mutex>
#include <vector>

#include "gpu/cuda_status.h"

namespace fabric_lib::gpu {
namespace {

constexpr size_t kPageBytes = 64 * 1024;
constexpr size_t kSlotStride = 64;  // one cache line per word
constexpr size_t kSlotsPerPage = kPageBytes / kSlotStride;

class MappedSlab {
 public:
  Result<MappedSlot> alloc() {
    std::lock_guard lock(mu_);
    if (free_.empty()) FABRIC_LIB_RETURN_IF_ERROR(grow());
    MappedSlot slot = free_.back();
    free_.pop_back();
    __atomic_store_n(slot.host, 0, __ATOMIC_RELEASE);
    return slot;
  }

  void free(const MappedSlot& slot) {
    if (!slot.host) return;
    __atomic_store_n(slot.host, 0, __ATOMIC_RELEASE);
    std::lock_guard lock(mu_);
    free_.push_back(slot);
  }

 private:
  Status grow() {
    void* host = nullptr;
    // Portable: usable from every device's context; mapped: kernels reach it over PCIe.
    cudaError_t e = cudaHostAlloc(&host, kPageBytes, cudaHostAllocMapped | cudaHostAllocPortable);
    if (e != cudaSuccess) return cuda_status("cudaHostAlloc(mapped)", e);
    void* device = nullptr;
    e = cudaHostGetDevicePointer(&device, host, 0);
    if (e != cudaSuccess) {
      cudaFreeHost(host);
      return cuda_status("cudaHostGetDevicePointer", e);
    }
    auto* h = static_cast<uint8_t*>(host);
    auto* d = static_cast<uint8_t*>(device);
    for (size_t i = kSlotsPerPage; i-- > 0;) {
      free_.push_back({reinterpret_cast<uint64_t*>(h + i * kSlotStride), reinterpret_cast<uint64_t*>(d + i * kSlotStride)});
      *reinterpret_cast<uint64_t*>(h + i * kSlotStride) = 0;
    }
    return ok_status();
  }

  std::mutex mu_;
  std::vector<MappedSlot> free_;
};

// Never destroyed: CUDA may already be torn down at exit, and pages must outlive late users.
MappedSlab& slab() {
  static MappedSlab* s = new MappedSlab();
  return *s;
}

}  // namespace

Result<MappedSlot> alloc_mapped_slot() { return slab().alloc(); }
void free_mapped_slot(const MappedSlot& slot) { slab().free(slot); }

}  // namespace fabric_lib::gpu

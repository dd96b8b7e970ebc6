// Where a pointer's memory lives (host or CUDA device), for registration. In builds without CUDA
// every pointer is host memory and kCuda is Unsupported; the inline fallbacks below say so, so
// callers need no #if.
#pragma once

#include <cstddef>
#include <cstdint>

#include "fabric_lib/memory.h"
#include "fabric_lib/status.h"

namespace fabric_lib::gpu {

#if FABRIC_LIB_HAVE_CUDA
inline constexpr bool kHaveCuda = true;
#else
inline constexpr bool kHaveCuda = false;
#endif

struct PointerInfo {
  MemoryKind kind = MemoryKind::kHost;  // kHost: pageable, pinned or mapped host memory
  int device = -1;                      // CUDA ordinal for kCuda
  bool managed = false;                 // cudaMallocManaged memory (refused by registration)
};

// A dma-buf file descriptor exported for a GPU range (cuMemGetHandleForAddressRange), as
// libfabric's fi_mr_dmabuf wants it: the dma-buf covers the page-aligned range starting at
// `base`, and the registered bytes start `offset` bytes into it. The caller closes `fd`.
struct DmabufRange {
  int fd = -1;
  uint64_t offset = 0;
  uint64_t length = 0;
  void* base = nullptr;
};

#if FABRIC_LIB_HAVE_CUDA
// cudaPointerGetAttributes. An error only when CUDA itself fails (no driver, no device).
Result<PointerInfo> query_pointer(const void* ptr);
// What register_memory registers [ptr, ptr + length) as:
//   kAuto: detected (kHost when CUDA is unusable: then no device memory can exist);
//   kCuda: checked: both ends must be device memory of the same device (InvalidArgument, or
//          Unsupported without a usable CUDA device);
//   kHost: taken as given, without asking CUDA (host-only programs never initialise it).
// Managed memory is refused (register device or host memory). *device gets the CUDA ordinal.
Result<MemoryKind> resolve_memory_kind(const void* ptr, size_t length, MemoryKind requested, int* device = nullptr);
// Exports a dma-buf for GPU memory [ptr, ptr + length) on `device`. Unsupported when the driver,
// the device or the kernel cannot (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED), with the reason.
Result<DmabufRange> export_dmabuf(const void* ptr, size_t length, int device);
#else
inline Result<PointerInfo> query_pointer(const void*) { return PointerInfo{}; }
inline Result<MemoryKind> resolve_memory_kind(const void*, size_t, MemoryKind requested, int* device = nullptr) {
  if (device) *device = -1;
  if (requested == MemoryKind::kCuda) {
    return unsupported("GPU memory needs a CUDA build of fabric-lib (this one was built with FABRIC_LIB_CUDA=OFF or without nvcc)");
  }
  return MemoryKind::kHost;
}
inline Result<DmabufRange> export_dmabuf(const void*, size_t, int) {
  return unsupported("dma-buf export needs a CUDA build of fabric-lib");
}
#endif

}  // namespace fabric_lib::gpu

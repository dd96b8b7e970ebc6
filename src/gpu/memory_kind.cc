// CUDA builds only: pointer attributes and dma-buf export.
#include "gpu/memory_kind.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <string>

#include "gpu/cuda_status.h"

namespace fabric_lib::gpu {
namespace {

// The library does not link libcuda (it must load, and serve host memory, on machines without a
// driver): driver entry points come through the runtime, once.
struct DriverCalls {
  using GetHandle = CUresult (*)(void*, CUdeviceptr, size_t, CUmemRangeHandleType, unsigned long long);
  using GetAttribute = CUresult (*)(int*, CUdevice_attribute, CUdevice);
  GetHandle get_handle = nullptr;
  GetAttribute get_attribute = nullptr;
  Status status;
};

const DriverCalls& driver_calls() {
  static DriverCalls calls = [] {
    DriverCalls c;
    cudaDriverEntryPointQueryResult found{};
    void* fn = nullptr;
    cudaError_t e = cudaGetDriverEntryPointByVersion("cuMemGetHandleForAddressRange", &fn, 12000, cudaEnableDefault, &found);
    if (e != cudaSuccess || found != cudaDriverEntryPointSuccess || !fn) {
      c.status = e != cudaSuccess ? cuda_status("cudaGetDriverEntryPointByVersion(cuMemGetHandleForAddressRange)", e)
                                  : unsupported("the CUDA driver has no cuMemGetHandleForAddressRange (needs CUDA 11.7+)");
      return c;
    }
    c.get_handle = reinterpret_cast<DriverCalls::GetHandle>(fn);
    fn = nullptr;
    e = cudaGetDriverEntryPointByVersion("cuDeviceGetAttribute", &fn, 12000, cudaEnableDefault, &found);
    if (e != cudaSuccess || found != cudaDriverEntryPointSuccess || !fn) {
      c.status = unsupported("the CUDA driver has no cuDeviceGetAttribute entry point");
      c.get_handle = nullptr;
      return c;
    }
    c.get_attribute = reinterpret_cast<DriverCalls::GetAttribute>(fn);
    return c;
  }();
  return calls;
}

}  // namespace

Result<PointerInfo> query_pointer(const void* ptr) {
  cudaPointerAttributes attr{};
  const cudaError_t e = cudaPointerGetAttributes(&attr, ptr);
  if (e != cudaSuccess) return cuda_status("cudaPointerGetAttributes", e);
  PointerInfo info;
  switch (attr.type) {
    case cudaMemoryTypeDevice:
      info.kind = MemoryKind::kCuda;
      info.device = attr.device;
      break;
    case cudaMemoryTypeManaged:
      info.kind = MemoryKind::kCuda;
      info.device = attr.device;
      info.managed = true;
      break;
    default:  // cudaMemoryTypeHost (pinned / mapped) or cudaMemoryTypeUnregistered (pageable)
      info.kind = MemoryKind::kHost;
      break;
  }
  return info;
}

Result<MemoryKind> resolve_memory_kind(const void* ptr, size_t length, MemoryKind requested, int* device) {
  if (device) *device = -1;
  if (requested == MemoryKind::kHost) return MemoryKind::kHost;
  if (requested != MemoryKind::kAuto && requested != MemoryKind::kCuda) {
    return invalid_argument("unknown memory kind " + std::to_string(static_cast<int>(requested)));
  }
  Result<PointerInfo> first = query_pointer(ptr);
  if (!first.ok()) {
    // No usable driver or device: then no device memory can exist either.
    if (requested == MemoryKind::kAuto && first.status().code() == ErrorCode::kUnsupported) return MemoryKind::kHost;
    return Status(first.status().code(), "cannot register GPU memory: " + first.status().message());
  }
  if (first->managed) {
    return invalid_argument("managed memory (cudaMallocManaged) cannot be registered: register device memory "
                            "(cudaMalloc, MemoryKind::kCuda) or host memory");
  }
  if (first->kind == MemoryKind::kHost) {
    if (requested == MemoryKind::kCuda) {
      return invalid_argument("register_memory(kCuda): the pointer is host memory, not CUDA device memory");
    }
    return MemoryKind::kHost;
  }
  if (length > 1) {
    Result<PointerInfo> last = query_pointer(static_cast<const uint8_t*>(ptr) + (length - 1));
    if (!last.ok()) return last.status();
    if (last->kind != MemoryKind::kCuda || last->device != first->device || last->managed) {
      return invalid_argument("register_memory: [ptr, ptr + length) is not device memory of one GPU (its last byte is not "
                              "on device " + std::to_string(first->device) + ")");
    }
  }
  if (device) *device = first->device;
  return MemoryKind::kCuda;
}

Result<DmabufRange> export_dmabuf(const void* ptr, size_t length, int device) {
  const DriverCalls& calls = driver_calls();
  if (!calls.get_handle) return calls.status;
  int supported = 0;
  CUresult r = calls.get_attribute(&supported, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, device);
  if (r != CUDA_SUCCESS || !supported) {
    return unsupported("GPU " + std::to_string(device) + " cannot export dma-bufs (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED=" +
                       std::to_string(supported) + ", CUresult " + std::to_string(static_cast<int>(r)) +
                       "; needs the open kernel modules and Linux 5.12+)");
  }
  // The range handed to the driver must be aligned to the host page size.
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t start = reinterpret_cast<uint64_t>(ptr);
  const uint64_t base = start & ~(page - 1);
  const uint64_t end = (start + length + page - 1) & ~(page - 1);
  // Registration runs on the group worker, which may have no CUDA context current yet.
  const cudaError_t set = cudaSetDevice(device);
  if (set != cudaSuccess) return cuda_status("cudaSetDevice", set);
  int fd = -1;
  r = calls.get_handle(&fd, static_cast<CUdeviceptr>(base), end - base, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
  if (r != CUDA_SUCCESS || fd < 0) {
    return unsupported("cuMemGetHandleForAddressRange(dma-buf) failed with CUresult " + std::to_string(static_cast<int>(r)));
  }
  return DmabufRange{fd, start - base, length, reinterpret_cast<void*>(base)};
}

}  // namespace fabric_lib::gpu

// What the ipc domain needs from CUDA, as an interface: exporting a GPU region (the IPC
// handle of the cudaMalloc allocation that contains it, and the region's offset in it), mapping
// a peer's allocation into this process, and copying into such mappings. The CUDA implementation
// is cuda_gpu_backend.h (CUDA builds only); tests substitute a fake that serves host memory.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "fabric_lib/status.h"
#include "gpu/copy_engine.h"
#include "transport/ipc/shm_segment.h"

namespace fabric_lib::transport::ipc {

struct GpuExport {
  int device = -1;            // CUDA ordinal of the region
  uint64_t alloc_offset = 0;  // the region's first byte, relative to its allocation's base
  uint8_t ipc_handle[64] = {};
};

class GpuBackend {
 public:
  virtual ~GpuBackend() = default;
  // The device holding [ptr, ptr + length) (one device, device memory, not managed). With
  // `for_peers`, also the IPC handle of the allocation containing it (cudaIpcGetMemHandle on the
  // base cuMemGetAddressRange finds, so sub-allocations of caching allocators work).
  virtual Result<GpuExport> export_region(void* ptr, size_t length, bool for_peers) = 0;
  // Maps the allocation behind a peer's registered region into this process, in `device`'s
  // context; returns the mapping's base (the region starts alloc_offset bytes into it).
  virtual Result<void*> open_import(const RegionInfo& region, int device) = 0;
  virtual void close_import(void* base, int device) = 0;
  // The device whose streams copy from host sources (the first GPU this domain registered, or 0).
  virtual int default_device() const = 0;
  virtual gpu::CopyEngine& copies() = 0;
  // Copies `length` bytes of `device`'s memory at `src` into this process's host memory at
  // `dst` and returns when they are there: how a GPU source reaches a peer's host memory (the
  // host copy engine then writes them with process_vm_writev).
  virtual Status copy_to_host(void* dst, const void* src, uint64_t length, int device) = 0;
};

// Makes the backend when a domain first meets GPU memory (CUDA is initialised only then).
using GpuBackendFactory = std::function<Result<std::unique_ptr<GpuBackend>>()>;

// Where the ipc domains of one group find the GPU copy engine they share (gpu/copy_engine_share.h):
// the first backend made for the group makes it, the others take it; it lives while one of them
// does. Only the group's progress owner touches it (one thread at a time, like the domains).
struct SharedCopies {
  std::weak_ptr<void> share;  // a gpu::CopyEngineShare
};

}  // namespace fabric_lib::transport::ipc

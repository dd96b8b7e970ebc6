// The ipc domain's CUDA side (CUDA builds only): export with cudaIpcGetMemHandle on the base
// of the cudaMalloc allocation holding a region (cuMemGetAddressRange; the region's offset in it
// travels too, so sub-allocations from caching allocators such as PyTorch's work), import with
// cudaIpcOpenMemHandle (the domain opens each remote allocation once per device and caches it),
// and copies through gpu::CudaCopyEngine.
//
// Memory from the CUDA virtual memory API (cuMemCreate, e.g. PyTorch's expandable segments)
// has no legacy IPC handle: registering it for remote writes fails with Unsupported.
//
// TransferEngineBuilder::ipc_copy_mode (env FABRIC_LIB_IPC_COPY) chooses how copies run (gpu/cuda_copy_engine.h).
#pragma once

#include <memory>

#include "transport/ipc/gpu_backend.h"
#include "gpu/cuda_copy_engine.h"

namespace fabric_lib::transport::ipc {

class CudaGpuBackend final : public GpuBackend {
 public:
  static Result<std::unique_ptr<GpuBackend>> create(gpu::CudaCopyEngine::Options options);
  ~CudaGpuBackend() override = default;

  Result<GpuExport> export_region(void* ptr, size_t length, bool for_peers) override;
  Result<void*> open_import(const RegionInfo& region, int device) override;
  void close_import(void* base, int device) override;
  // Host sources copy on the first GPU this domain registered, else on GPU 0.
  int default_device() const override { return default_device_ < 0 ? 0 : default_device_; }
  gpu::CopyEngine& copies() override { return copies_; }
  Status copy_to_host(void* dst, const void* src, uint64_t length, int device) override;

 private:
  explicit CudaGpuBackend(gpu::CudaCopyEngine::Options options) : copies_(options) {}

  gpu::CudaCopyEngine copies_;
  int default_device_ = -1;
};

// The factory the backend factory hands to ipc domains: copies run in `mode`.
GpuBackendFactory cuda_gpu_backend_factory(gpu::GpuCopyMode mode);

}  // namespace fabric_lib::transport::ipc

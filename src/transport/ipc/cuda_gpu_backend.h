// The ipc domain's CUDA side (CUDA builds only): export with cudaIpcGetMemHandle on the base
// of the cudaMalloc allocation holding a region (cuMemGetAddressRange; the region's offset in it
// travels too, so sub-allocations from caching allocators such as PyTorch's work), import with
// cudaIpcOpenMemHandle (the domain opens each remote allocation once per device and caches it),
// and copies through gpu::CudaCopyEngine.
//
// Memory from the CUDA virtual memory API (cuMemCreate, e.g. PyTorch's expandable segments)
// has no legacy IPC handle: registering it for remote writes fails with Unsupported.
//
// TransferEngineBuilder::ipc_gpu_copies (env FABRIC_LIB_IPC_COPY) chooses how copies run and
// ipc_launcher_copies (env FABRIC_LIB_IPC_LAUNCHER_COPIES) which go to the launcher thread
// (gpu/cuda_copy_engine.h).
#pragma once

#include <map>
#include <memory>

#include "transport/ipc/gpu_backend.h"
#include "gpu/copy_engine_share.h"
#include "gpu/cuda_copy_engine.h"

namespace fabric_lib::transport::ipc {

class CudaGpuBackend final : public GpuBackend {
 public:
  // Copies go through `group`'s shared engine (made here when the group has none yet); a null
  // `group` gives this backend an engine of its own.
  static Result<std::unique_ptr<GpuBackend>> create(gpu::CudaCopyEngine::Options options,
                                                    std::shared_ptr<SharedCopies> group = nullptr);
  ~CudaGpuBackend() override;

  Result<GpuExport> export_region(void* ptr, size_t length, bool for_peers) override;
  Result<void*> open_import(const RegionInfo& region, int device) override;
  void close_import(void* base, int device) override;
  // Host sources copy on the first GPU this domain registered, else on GPU 0.
  int default_device() const override { return default_device_ < 0 ? 0 : default_device_; }
  gpu::CopyEngine& copies() override { return *copies_; }
  Status copy_to_host(void* dst, const void* src, uint64_t length, int device) override;

 private:
  CudaGpuBackend() = default;

  std::shared_ptr<gpu::CopyEngineShare> share_;
  gpu::CudaCopyEngine* engine_ = nullptr;  // the share's engine (prepare())
  std::unique_ptr<gpu::CopyEngine> copies_;  // this backend's client of the share
  int default_device_ = -1;
  // copy_to_host's streams, one per device, non-blocking: a read must never wait for (or hold
  // up) the application's work on the legacy default stream, which PyTorch uses by default.
  std::map<int, cudaStream_t> read_streams_;
};

// The factory the backend factory hands to ipc domains: copies run as `copies` says (mode,
// launcher threshold), through the engine the domains of `group` share.
GpuBackendFactory cuda_gpu_backend_factory(const gpu::GpuCopySettings& copies, std::shared_ptr<SharedCopies> group);

}  // namespace fabric_lib::transport::ipc

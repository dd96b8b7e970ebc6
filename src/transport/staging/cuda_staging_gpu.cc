// StagingGpu over the CUDA runtime: cudaHostAlloc'd bounce buffers, cudaPointerGetAttributes,
// and a CudaCopyEngine in memcpy mode (staging copies are whole chunks, device to host).
#include <cuda_runtime_api.h>

#include "gpu/cuda_copy_engine.h"
#include "gpu/cuda_status.h"
#include "gpu/memory_kind.h"
#include "transport/staging/staging_gpu.h"

namespace fabric_lib::transport::staging {
namespace {

class CudaStagingGpu final : public StagingGpu {
 public:
  static Result<std::unique_ptr<StagingGpu>> create() {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) return gpu::cuda_status("cudaGetDeviceCount", e);
    if (count == 0) return unsupported("no CUDA device");
    return std::unique_ptr<StagingGpu>(new CudaStagingGpu());
  }
  ~CudaStagingGpu() override { copies_.drain(); }

  Result<void*> alloc_pinned(size_t bytes) override {
    void* p = nullptr;
    const cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
    if (e != cudaSuccess) return gpu::cuda_status("cudaHostAlloc(bounce buffers)", e);
    return p;
  }
  void free_pinned(void* p) override {
    if (p) cudaFreeHost(p);
  }
  Result<int> device_of(const void* ptr) override {
    Result<gpu::PointerInfo> info = gpu::query_pointer(ptr);
    if (!info.ok()) return info.status();
    if (info->kind != MemoryKind::kCuda) return invalid_argument("not CUDA device memory");
    return info->device;
  }
  gpu::CopyEngine& copies() override { return copies_; }

 private:
  CudaStagingGpu() : copies_(options()) {}
  static gpu::CudaCopyEngine::Options options() {
    gpu::CudaCopyEngine::Options o;
    o.mode = gpu::GpuCopyMode::kMemcpy;
    o.streams_per_device = 1;  // one chunk pipeline per device; chunks are large
    return o;
  }
  gpu::CudaCopyEngine copies_;
};

}  // namespace

StagingGpuFactory cuda_staging_gpu_factory() {
  return [] { return CudaStagingGpu::create(); };
}

}  // namespace fabric_lib::transport::staging

#include "transport/ipc/cuda_gpu_backend.h"

#include <cuda.h>

#include <cstdlib>
#include <cstring>

#include "base/log.h"
#include "fabric_lib/memory.h"
#include "gpu/cuda_status.h"
#include "gpu/device_guard.h"
#include "gpu/memory_kind.h"

namespace fabric_lib::transport::ipc {
namespace {

// The library links no libcuda (it must load without a driver): cuMemGetAddressRange comes
// through the runtime's entry-point query, once.
using GetAddressRange = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);

Result<GetAddressRange> address_range_call() {
  static Result<GetAddressRange> call = []() -> Result<GetAddressRange> {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    const cudaError_t e = cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000, cudaEnableDefault, &found);
    if (e != cudaSuccess) return gpu::cuda_status("cudaGetDriverEntryPointByVersion(cuMemGetAddressRange)", e);
    if (found != cudaDriverEntryPointSuccess || !fn) return unsupported("the CUDA driver has no cuMemGetAddressRange");
    return reinterpret_cast<GetAddressRange>(fn);
  }();
  return call;
}

Result<std::pair<uint8_t*, size_t>> allocation_of(const void* ptr) {
  Result<GetAddressRange> call = address_range_call();
  if (!call.ok()) return call.status();
  CUdeviceptr base = 0;
  size_t size = 0;
  const CUresult r = (*call)(&base, &size, reinterpret_cast<CUdeviceptr>(ptr));
  if (r != CUDA_SUCCESS) {
    return invalid_argument("cuMemGetAddressRange failed (CUresult " + std::to_string(static_cast<int>(r)) +
                            "): the pointer is not in a CUDA allocation");
  }
  return std::make_pair(reinterpret_cast<uint8_t*>(base), size);
}

}  // namespace

Result<std::unique_ptr<GpuBackend>> CudaGpuBackend::create(gpu::CudaCopyEngine::Options options,
                                                           std::shared_ptr<SharedCopies> group) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) return gpu::cuda_status("cudaGetDeviceCount", e);
  if (count == 0) return unsupported("no CUDA device");
  std::shared_ptr<gpu::CopyEngineShare> share =
      group ? std::static_pointer_cast<gpu::CopyEngineShare>(group->share.lock()) : nullptr;
  if (!share) {
    FL_LOG_DEBUG("ipc: CUDA backend, {} device(s), copy mode {}", count, gpu_copy_mode_name(options.mode));
    share = std::make_shared<gpu::CopyEngineShare>(std::make_unique<gpu::CudaCopyEngine>(options));
    if (group) group->share = share;
  }
  std::unique_ptr<CudaGpuBackend> backend(new CudaGpuBackend());
  backend->engine_ = static_cast<gpu::CudaCopyEngine*>(&share->engine());
  backend->copies_ = share->client();
  backend->share_ = std::move(share);
  return std::unique_ptr<GpuBackend>(std::move(backend));
}

Result<GpuExport> CudaGpuBackend::export_region(void* ptr, size_t length, bool for_peers) {
  int device = -1;
  Result<MemoryKind> kind = gpu::resolve_memory_kind(ptr, length, MemoryKind::kCuda, &device);
  if (!kind.ok()) return kind.status();
  GpuExport out;
  out.device = device;
  if (default_device_ < 0) default_device_ = device;
  // Now, at registration, not at the first copy: that may come while the application's kernel
  // spins waiting for it, and a lazy module load would wait for that kernel.
  FABRIC_LIB_RETURN_IF_ERROR(gpu::load_copy_kernels(device));
  FABRIC_LIB_RETURN_IF_ERROR(engine_->prepare(device));
  if (!for_peers) return out;
  gpu::DeviceGuard guard(device);  // the driver call below needs the device's context current
  if (guard.status() != cudaSuccess) return gpu::cuda_status("cudaSetDevice", guard.status());
  Result<std::pair<uint8_t*, size_t>> alloc = allocation_of(ptr);
  if (!alloc.ok()) return alloc.status();
  auto [base, size] = *alloc;
  const auto* p = static_cast<const uint8_t*>(ptr);
  if (p < base || length > size || static_cast<size_t>(p - base) > size - length) {
    return invalid_argument("ipc: the region [ptr, ptr + " + std::to_string(length) +
                            ") spans more than one CUDA allocation; register each allocation separately");
  }
  cudaIpcMemHandle_t handle{};
  const cudaError_t e = cudaIpcGetMemHandle(&handle, base);
  if (e != cudaSuccess) {
    const Status s = gpu::cuda_status("cudaIpcGetMemHandle", e);
    return Status(ErrorCode::kUnsupported,
                  s.message() + " — ipc exports cudaMalloc allocations; memory from the CUDA virtual memory API "
                                "(cuMemCreate, PyTorch expandable_segments) has no IPC handle");
  }
  static_assert(sizeof(handle) == sizeof(out.ipc_handle));
  std::memcpy(out.ipc_handle, &handle, sizeof(handle));
  out.alloc_offset = static_cast<uint64_t>(p - base);
  // Peers' scattered writes into such an import run several times slower (peer_written_cuda_bytes,
  // memory.h). Said once per registration.
  if (size != peer_written_cuda_bytes(size)) {
    FL_LOG_WARN("ipc: the CUDA allocation under a registered region is {} bytes, not a multiple of 2 MiB: peers' "
                "scattered writes into it may run several times slower; allocate GPU memory that peers write into "
                "in multiples of 2 MiB (fabric_lib::peer_written_cuda_bytes)",
                size);
  }
  return out;
}

Result<void*> CudaGpuBackend::open_import(const RegionInfo& region, int device) {
  gpu::DeviceGuard guard(device);
  if (guard.status() != cudaSuccess) return gpu::cuda_status("cudaSetDevice", guard.status());
  cudaIpcMemHandle_t handle{};
  std::memcpy(&handle, region.ipc_handle, sizeof(handle));
  void* base = nullptr;
  const cudaError_t e = cudaIpcOpenMemHandle(&base, handle, cudaIpcMemLazyEnablePeerAccess);
  if (e != cudaSuccess) {
    const Status s = gpu::cuda_status("cudaIpcOpenMemHandle", e);
    return Status(s.code() == ErrorCode::kInvalidArgument ? ErrorCode::kPeerUnreachable : s.code(),
                  s.message() + " (mapping the peer's GPU memory on device " + std::to_string(device) + ")");
  }
  // The table came from another process: the region must lie inside what was mapped.
  Result<std::pair<uint8_t*, size_t>> alloc = allocation_of(base);
  if (!alloc.ok() || region.alloc_offset > alloc->second || region.length > alloc->second - region.alloc_offset) {
    cudaIpcCloseMemHandle(base);
    return malformed("ipc: the peer's region lies outside the GPU allocation its IPC handle maps");
  }
  return base;
}

void CudaGpuBackend::close_import(void* base, int device) {
  gpu::DeviceGuard guard(device);
  const cudaError_t e = cudaIpcCloseMemHandle(base);
  if (e != cudaSuccess) FL_LOG_DEBUG("cudaIpcCloseMemHandle: {}", gpu::cuda_status("cudaIpcCloseMemHandle", e).message());
}

CudaGpuBackend::~CudaGpuBackend() {
  for (auto& [device, stream] : read_streams_) {
    gpu::DeviceGuard guard(device);
    cudaStreamDestroy(stream);
  }
}

Status CudaGpuBackend::copy_to_host(void* dst, const void* src, uint64_t length, int device) {
  gpu::DeviceGuard guard(device);
  if (guard.status() != cudaSuccess) return gpu::cuda_status("cudaSetDevice", guard.status());
  cudaStream_t& stream = read_streams_[device];
  if (stream == nullptr) {
    const cudaError_t made = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    if (made != cudaSuccess) {
      read_streams_.erase(device);
      return gpu::cuda_status("cudaStreamCreateWithFlags", made);
    }
  }
  cudaError_t e = cudaMemcpyAsync(dst, src, length, cudaMemcpyDeviceToHost, stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
  if (e != cudaSuccess) return gpu::cuda_status("cudaMemcpyAsync (GPU source into host memory)", e);
  return ok_status();
}

GpuBackendFactory cuda_gpu_backend_factory(const gpu::GpuCopySettings& copies, std::shared_ptr<SharedCopies> group) {
  return [copies, group = std::move(group)] {
    gpu::CudaCopyEngine::Options options;
    options.mode = copies.mode;
    options.launcher_copies = copies.launcher_copies;
    options.min_launch_warps = copies.min_launch_warps;
    options.loads_per_lane = copies.loads_per_lane;
    options.streams_per_device = copies.streams_per_device;
    return CudaGpuBackend::create(options, group);
  };
}

}  // namespace fabric_lib::transport::ipc

#include "common/cuda_region.h"

#include <cuda_runtime_api.h>

#include <string>

#include "fabric_lib/memory.h"

namespace fabric_lib::tools {
namespace {

Status cuda_error(const char* call, cudaError_t e) {
  cudaGetLastError();
  return Status(ErrorCode::kProviderError, std::string(call) + ": " + cudaGetErrorString(e));
}

class CudaRegion final : public Region {
 public:
  CudaRegion(uint8_t* alloc, uint8_t* region, size_t size, int device)
      : alloc_(alloc), region_(region), size_(size), device_(device) {}
  ~CudaRegion() override { cudaFree(alloc_); }
  uint8_t* data() const override { return region_; }
  size_t size() const override { return size_; }
  MemoryKind kind() const override { return MemoryKind::kCuda; }
  Status read(uint64_t offset, uint8_t* out, size_t n) const override {
    FABRIC_LIB_RETURN_IF_ERROR(check_range(offset, n));
    if (n == 0) return ok_status();
    const cudaError_t e = cudaMemcpy(out, region_ + offset, n, cudaMemcpyDeviceToHost);
    return e == cudaSuccess ? ok_status() : cuda_error("cudaMemcpy(device to host)", e);
  }
  Status write(uint64_t offset, const uint8_t* in, size_t n) override {
    FABRIC_LIB_RETURN_IF_ERROR(check_range(offset, n));
    if (n == 0) return ok_status();
    const cudaError_t e = cudaMemcpy(region_ + offset, in, n, cudaMemcpyHostToDevice);
    return e == cudaSuccess ? ok_status() : cuda_error("cudaMemcpy(host to device)", e);
  }
  Status zero() override {
    cudaError_t e = cudaMemset(region_, 0, size_);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    return e == cudaSuccess ? ok_status() : cuda_error("cudaMemset", e);
  }

 private:
  uint8_t* alloc_;
  uint8_t* region_;
  size_t size_;
  int device_;
};

}  // namespace

int peer_gpu() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return 0;
  return count >= 2 ? 1 : 0;
}

Result<std::unique_ptr<Region>> make_cuda_region(size_t bytes, int device, size_t offset_in_allocation) {
  cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) return cuda_error("cudaSetDevice", e);
  // At least 4 KiB past the region, in a size peers map with large pages (peer_written_cuda_bytes:
  // the odd size 2 GiB + 4 KiB made fabric-bench's ipc paged writes measure the small-page mapping
  // rather than the engine; docs/gpu.md, "Past L2").
  const size_t total = peer_written_cuda_bytes(bytes + offset_in_allocation + 4096);
  uint8_t* alloc = nullptr;
  e = cudaMalloc(reinterpret_cast<void**>(&alloc), total);
  if (e != cudaSuccess) return cuda_error("cudaMalloc", e);
  e = cudaMemset(alloc, 0, total);
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  if (e != cudaSuccess) {
    cudaFree(alloc);
    return cuda_error("cudaMemset", e);
  }
  return std::unique_ptr<Region>(new CudaRegion(alloc, alloc + offset_in_allocation, bytes, device));
}

}  // namespace fabric_lib::tools

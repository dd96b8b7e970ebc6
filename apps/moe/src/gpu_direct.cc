// The direct path's CUDA IPC: this rank exports its area (flags and route blocks), dispatch
// receive, dispatch send and combine receive regions; connect maps every peer's. The blob
// (RankInfo::ipc_blob) is: u32 count (4) | count x (64-byte cudaIpcMemHandle_t | u64 bytes).
#include <cstring>
#include <string>

#include "fabric_lib/memory.h"
#include "gpu_part.h"

namespace fabric_lib::moe::detail {
namespace {

constexpr uint32_t kIpcRegions = 4;
constexpr size_t kEntryBytes = sizeof(cudaIpcMemHandle_t) + 8;
static_assert(sizeof(cudaIpcMemHandle_t) == 64, "CUDA IPC handles are 64 bytes");

}  // namespace

CudaGpuPart::~CudaGpuPart() {
  for (void* p : opened_) cudaIpcCloseMemHandle(p);
}

Status CudaGpuPart::init_direct(std::vector<Allocation>& allocations) {
  const kernels::DirectAreaLayout lay{st_.g.world, st_.g.route_block};
  void* p = nullptr;
  const size_t n = peer_written_cuda_bytes(round_up(lay.bytes(), 4096));  // peers' kernels store into it
  FABRIC_LIB_RETURN_IF_ERROR(cuda_status(cudaMalloc(&p, n), "cudaMalloc (direct area)"));
  FABRIC_LIB_RETURN_IF_ERROR(cuda_status(cudaMemset(p, 0, n), "cudaMemset"));
  allocations.emplace_back(p, n, [](void* q) { cudaFree(q); });
  area_ = static_cast<uint8_t*>(p);
  return ok_status();
}

std::vector<uint8_t> CudaGpuPart::ipc_blob() const {
  if (!ctx_.direct) return {};
  const BufferPlan b = BufferPlan::from(st_.g);
  const kernels::DirectAreaLayout lay{st_.g.world, st_.g.route_block};
  const std::pair<void*, size_t> regions[kIpcRegions] = {{area_, lay.bytes()},
                                                         {st_.regions.dispatch_recv, b.dispatch_recv},
                                                         {st_.regions.dispatch_send, b.dispatch_send},
                                                         {st_.regions.combine_recv, b.combine_recv}};
  std::vector<uint8_t> blob(4 + kIpcRegions * kEntryBytes, 0);
  const uint32_t count = kIpcRegions;
  std::memcpy(blob.data(), &count, 4);
  for (uint32_t i = 0; i < kIpcRegions; ++i) {
    cudaIpcMemHandle_t h{};
    if (cudaIpcGetMemHandle(&h, regions[i].first) != cudaSuccess) return {};  // connect then refuses the info
    std::memcpy(blob.data() + 4 + i * kEntryBytes, &h, sizeof h);
    const uint64_t bytes = regions[i].second;
    std::memcpy(blob.data() + 4 + i * kEntryBytes + sizeof h, &bytes, 8);
  }
  return blob;
}

Status CudaGpuPart::connect_direct(const std::vector<RankInfo>& infos) {
  const BufferPlan b = BufferPlan::from(st_.g);
  const kernels::DirectAreaLayout lay{st_.g.world, st_.g.route_block};
  const uint64_t expected[kIpcRegions] = {lay.bytes(), b.dispatch_recv, b.dispatch_send, b.combine_recv};
  FABRIC_LIB_RETURN_IF_ERROR(cuda_status(cudaSetDevice(device_), "cudaSetDevice"));
  for (uint32_t r = 0; r < st_.g.world; ++r) {
    uint8_t* mapped[kIpcRegions];
    if (r == st_.g.rank) {
      mapped[0] = area_;
      mapped[1] = st_.regions.dispatch_recv;
      mapped[2] = st_.regions.dispatch_send;
      mapped[3] = st_.regions.combine_recv;
    } else {
      const std::vector<uint8_t>& blob = infos[r].ipc_blob;
      uint32_t count = 0;
      if (blob.size() != 4 + kIpcRegions * kEntryBytes) return malformed("rank " + std::to_string(r) + ": bad IPC blob");
      std::memcpy(&count, blob.data(), 4);
      if (count != kIpcRegions) return malformed("rank " + std::to_string(r) + ": bad IPC region count");
      for (uint32_t i = 0; i < kIpcRegions; ++i) {
        cudaIpcMemHandle_t h;
        uint64_t bytes = 0;
        std::memcpy(&h, blob.data() + 4 + i * kEntryBytes, sizeof h);
        std::memcpy(&bytes, blob.data() + 4 + i * kEntryBytes + sizeof h, 8);
        if (bytes != expected[i]) return malformed("rank " + std::to_string(r) + ": IPC region of another size");
        void* p = nullptr;
        FABRIC_LIB_RETURN_IF_ERROR(
            cuda_status(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle"));
        opened_.push_back(p);
        mapped[i] = static_cast<uint8_t*>(p);
      }
    }
    ctx_.peers.area[r] = mapped[0];
    ctx_.peers.dispatch_recv[r] = mapped[1];
    ctx_.peers.dispatch_send[r] = mapped[2];
    ctx_.peers.combine_recv[r] = mapped[3];
  }
  return ok_status();
}

}  // namespace fabric_lib::moe::detail

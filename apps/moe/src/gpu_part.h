// The CUDA implementation of GpuPart (all_to_all_gpu.cc, gpu_direct.cc).
#pragma once

#include <cuda_runtime_api.h>

#include <vector>

#include "all_to_all_impl.h"
#include "kernels/kernels.h"

namespace fabric_lib::moe::detail {

Status cuda_status(cudaError_t e, const char* what);

class CudaGpuPart : public GpuPart {
 public:
  CudaGpuPart(RankState& st, int device);
  ~CudaGpuPart() override;
  Status init(std::vector<Allocation>& allocations);

  Status dispatch_send(const DispatchSendArgs& a, void* stream) override;
  Status dispatch_recv(const DispatchRecvArgs& a, void* stream) override;
  Status combine_send(const CombineSendArgs& a, void* stream) override;
  Status combine_recv(const CombineRecvArgs& a, void* stream) override;
  std::vector<uint8_t> ipc_blob() const override;
  Status connect_direct(const std::vector<RankInfo>& infos) override;
  Result<uint64_t> synchronize_and_step() override;

 private:
  Status init_direct(std::vector<Allocation>& allocations);
  Status launched(cudaError_t e, const char* what);
  Status select_device();

  RankState& st_;
  int device_;
  int sms_ = 1;
  kernels::Context ctx_{};
  // Direct path: the exported regions, in blob order (area, dispatch_recv, dispatch_send,
  // combine_recv), and the peers' mappings to close.
  uint8_t* area_ = nullptr;
  std::vector<void*> opened_;
};

}  // namespace fabric_lib::moe::detail

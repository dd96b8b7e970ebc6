// The CopyEngine over the CUDA runtime (CUDA builds only): copies into any pointer of this process
// — peer GPU memory mapped with CUDA IPC, or pinned host memory — from GPU or host sources, on a
// small pool of non-blocking streams per device, so independent copies overlap and finish in any
// order.
//
// Copies submitted during one poll pass are issued together at the next progress() ("flush"):
//   - large copies, host sources, and every copy in kMemcpy mode: one cudaMemcpyAsync each,
//     spread round-robin over the streams;
//   - small GPU-to-GPU copies (<= small_copy_bytes, both ends kCuda): in kKernel mode one page-copy kernel launch
//     per 64 of them (page_copy_kernel.h), the launches spread round-robin over the streams; in
//     kBatch mode one cudaMemcpyBatchAsync per flush.
// Each stream used in a flush records one event; when it fires, that flush's copies on the
// stream are complete (their bytes are in the target's memory).
#pragma once

#include <cuda_runtime_api.h>

#include <deque>
#include <map>
#include <span>
#include <vector>

#include "gpu/copy_engine.h"
#include "gpu/copy_mode.h"
#include "gpu/device_guard.h"

namespace fabric_lib::gpu {

class CudaCopyEngine final : public CopyEngine {
 public:
  struct Options {
    GpuCopyMode mode = GpuCopyMode::kAuto;
    size_t streams_per_device = 4;
    uint64_t small_copy_bytes = 256 * 1024;
    size_t max_inflight = 16384;
  };
  explicit CudaCopyEngine(Options options) : options_(options) {}
  ~CudaCopyEngine() override;

  CopySubmit submit(const CopyRequest& request, Status* error) override;
  void progress(std::vector<CopyDone>& done) override;
  size_t inflight() const override { return inflight_; }
  void drain() override;

 private:
  struct Flushed {  // one flush's copies on one stream, complete when `event` fires
    cudaEvent_t event = nullptr;
    std::vector<uint64_t> ops;
  };
  struct StreamState {
    cudaStream_t stream = nullptr;
    std::deque<Flushed> flushed;
  };
  struct DeviceState {
    std::vector<StreamState> streams;
    size_t next = 0;
    std::vector<CopyRequest> pending;
  };

  Result<DeviceState*> device_state(int device);
  void flush(int device, DeviceState& d, std::vector<CopyDone>& done);
  // Issues small GPU-to-GPU copies as kernels / one batched call on stream `s`.
  cudaError_t issue_small(std::span<const CopyRequest* const> small, cudaStream_t stream);
  cudaEvent_t take_event();

  Options options_;
  std::map<int, DeviceState> devices_;
  std::vector<cudaEvent_t> free_events_;
  size_t inflight_ = 0;
};

// Loads the copy engine's kernels into `device`'s context, once per device per process (thread
// safe). Call it at set-up, before application kernels that wait for copies run (page_copy_kernel.h
// says why): the ipc domain's registration of CUDA memory does. Not at the first copy: loading
// then could itself wait for a spinning kernel.
Status load_copy_kernels(int device);

}  // namespace fabric_lib::gpu

// One GPU rank of the device tests: device buffers for a step's inputs and outputs, the step as
// one stream of launches (dispatch send/recv, the test's expert layer, combine send/recv — the
// sequence a CUDA graph captures), and the checks against the host reference
// (tests/support/moe_reference.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "fabric_lib/moe/all_to_all.h"
#include "support/moe_reference.h"

namespace fabric_lib::moe::testing {

class GpuRank {
 public:
  GpuRank(AllToAll& a2a, cudaStream_t stream);
  ~GpuRank();
  Status allocate();
  // Copies `mine` (padded to M rows with garbage) and bound_m = mine.tokens to the device.
  Status upload(const TokenBatch& mine);
  // Issues one step on the stream; nothing synchronises (capturable).
  Status issue_step();
  // The halves one by one, with events between them (the benchmark).
  Status issue_step_timed(cudaEvent_t ev[6]);
  // Waits for the stream, copies the outputs back and checks them against the reference built
  // from every rank's batch. Fills `digest` with rows_digest of the combine output.
  Status check(uint64_t step, const std::vector<TokenBatch>& all, uint64_t& digest);
  Status sync();

 private:
  AllToAll& a2a_;
  cudaStream_t stream_;
  const MoeConfig c_;
  const Geometry g_;
  std::vector<void*> allocations_;
  uint8_t *x_ = nullptr, *out_x_ = nullptr, *y_ = nullptr, *out_ = nullptr;
  float *scales_ = nullptr, *out_s_ = nullptr, *weights_ = nullptr;
  uint32_t* indices_ = nullptr;
  int32_t *bound_m_ = nullptr, *counts_ = nullptr;
  uint32_t tokens_ = 0;  // valid tokens of the uploaded batch
};

}  // namespace fabric_lib::moe::testing

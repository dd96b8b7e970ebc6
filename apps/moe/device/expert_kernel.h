// The GPU tests' expert layer (device side of tests/support/moe_reference.h's expert_apply):
// y[row] = value(x[row]) * (1 + (e % 7) / 8) for the rows of each local expert e of the padded
// layout dispatch produced, rounded to bf16 or fp32. Gap rows are left as they are.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace fabric_lib::moe::testing {

struct ExpertArgs {
  const uint8_t* x;          // [rows, H] of in dtype
  const float* scales;       // [rows, S] or null
  const int32_t* counts;     // [L] from dispatch (device)
  uint8_t* y;                // [rows, H] of out dtype
  uint32_t rows, hidden, hidden_scale, local_experts, first_expert, padding;
  uint32_t in_kind;          // 1 fp8 e4m3, 2 bf16, 4 fp32
  uint32_t out_fp32;
};

cudaError_t launch_expert(const ExpertArgs& a, cudaStream_t stream);
// Loads the kernel now. It is launched while dispatch_recv waits, and CUDA's lazy module loading
// would make that first launch wait for the running kernels, holding the context: the proxy's
// copies over the ipc backend (CUDA calls) then block too, and the step deadlocks until its
// deadline (docs/moe.md, "Lazy module loading").
cudaError_t load_expert_kernel();

}  // namespace fabric_lib::moe::testing

// The CPU implementation of the kernels' four halves, on host memory, with the byte layouts of
// layout.h that the CUDA kernels use. Each runs on the caller's thread, waits (on the doorbell,
// bounded) for what it needs from the proxy and the engine, and returns the rank's failure if
// the step was aborted.
#pragma once

#include <cstdint>

#include "fabric_lib/moe/args.h"
#include "fabric_lib/status.h"
#include "rank_state.h"

namespace fabric_lib::moe::detail {

// The step counter and the valid token count of the step in flight (the GPU keeps them in device
// memory; the CPU halves here).
struct CpuStep {
  uint64_t step = 0;     // of the last dispatch_send
  uint32_t tokens = 0;   // valid tokens of that step
};

Status cpu_dispatch_send(RankState& st, CpuStep& cs, const DispatchSendArgs& a);
Status cpu_dispatch_recv(RankState& st, const CpuStep& cs, const DispatchRecvArgs& a);
Status cpu_combine_send(RankState& st, const CpuStep& cs, const CombineSendArgs& a);
Status cpu_combine_recv(RankState& st, const CpuStep& cs, const CombineRecvArgs& a);

// Waits until control word `w` >= target (or the rank aborts, or the word reports an engine
// failure, or `timeout` passes).
Status wait_word(RankState& st, uint32_t w, uint64_t target, std::chrono::nanoseconds timeout, const char* what);

// bf16 <-> fp32 (round to nearest even; NaN stays NaN), as __float2bfloat16_rn does.
uint16_t float_to_bf16(float f);
float bf16_to_float(uint16_t b);

}  // namespace fabric_lib::moe::detail

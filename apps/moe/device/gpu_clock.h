// Maps the GPU's globaltimer onto the CPU's steady_clock for the benchmark's proxy reaction time:
// a ping-pong through two mapped words (fabric_lib::MappedWord), offset = cpu - (g0 + g1) / 2.
#pragma once

namespace fabric_lib::moe::testing {

struct GpuClock {
  double offset_ns = 0;    // median of cpu_steady_ns - gpu_globaltimer_ns
  double half_rtt_ns = 0;  // median one-way estimate: the offset's uncertainty
  int samples = 0;
};

GpuClock calibrate_gpu_clock(int rounds = 200);

}  // namespace fabric_lib::moe::testing

// calibrate_gpu_clock (gpu_clock.h).
#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "fabric_lib/device/flags.cuh"
#include "fabric_lib/mapped_word.h"
#include "gpu_clock.h"

namespace fabric_lib::moe::testing {
namespace {

__global__ void ping_kernel(uint64_t* ping, const uint64_t* pong, uint64_t* stamps, int rounds) {
  for (int i = 1; i <= rounds; ++i) {
    const uint64_t g0 = fabric_lib::device::globaltimer_ns();
    fabric_lib::device::store_release(ping, static_cast<uint64_t>(i));
    while (fabric_lib::device::load_acquire(pong) < static_cast<uint64_t>(i)) {
    }
    stamps[2 * (i - 1)] = g0;
    stamps[2 * (i - 1) + 1] = fabric_lib::device::globaltimer_ns();
  }
}

uint64_t cpu_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

}  // namespace

GpuClock calibrate_gpu_clock(int rounds) {
  GpuClock out;
  Result<MappedWord> ping = alloc_mapped_word(), pong = alloc_mapped_word();
  uint64_t* stamps = nullptr;
  if (!ping.ok() || !pong.ok() || cudaMalloc(&stamps, sizeof(uint64_t) * 2 * rounds) != cudaSuccess) return out;
  std::vector<uint64_t> cpu(rounds);
  ping_kernel<<<1, 1>>>(ping->device_ptr(), pong->device_ptr(), stamps, rounds);
  for (int i = 1; i <= rounds; ++i) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (ping->load() < static_cast<uint64_t>(i)) {
      if (std::chrono::steady_clock::now() > give_up) return out;  // kernel did not start
    }
    cpu[i - 1] = cpu_ns();
    pong->store(static_cast<uint64_t>(i));
  }
  std::vector<uint64_t> g(2 * rounds);
  cudaMemcpy(g.data(), stamps, g.size() * 8, cudaMemcpyDeviceToHost);
  cudaFree(stamps);
  std::vector<double> offsets, halves;
  for (int i = 0; i < rounds; ++i) {
    offsets.push_back(static_cast<double>(cpu[i]) - (static_cast<double>(g[2 * i]) + static_cast<double>(g[2 * i + 1])) / 2);
    halves.push_back((static_cast<double>(g[2 * i + 1]) - static_cast<double>(g[2 * i])) / 2);
  }
  std::sort(offsets.begin(), offsets.end());
  std::sort(halves.begin(), halves.end());
  out.offset_ns = offsets[rounds / 2];
  out.half_rtt_ns = halves[rounds / 2];
  out.samples = rounds;
  return out;
}

}  // namespace fabric_lib::moe::testing

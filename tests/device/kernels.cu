#include "kernels.h"

#include <cuda_runtime.h>

#include <vector>

#include "fabric_lib/device/flags.cuh"

namespace fabric_lib::device_tests {
namespace {

namespace dev = fabric_lib::device;

// common/pattern.h, on the device (a test compares the two).
__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
__device__ __forceinline__ uint8_t pattern_byte(uint64_t seed, uint64_t i) {
  return static_cast<uint8_t>(splitmix64(seed ^ (i >> 3) * 0x100000001b3ull) >> ((i & 7) * 8));
}

__device__ void busy_wait_ns(uint32_t ns) {
  const uint64_t start = dev::globaltimer_ns();
  while (dev::globaltimer_ns() - start < ns) {
  }
}

__global__ void layer_bumps_kernel(uint64_t* word, uint64_t* epoch, int layers, uint32_t busy_ns) {
  const uint64_t base = *epoch * static_cast<uint64_t>(layers);
  for (int l = 1; l <= layers; ++l) {
    busy_wait_ns(busy_ns);  // the layer's "compute"
    dev::store_release(word, base + static_cast<uint64_t>(l));
  }
  *epoch += 1;
}

__global__ void flag_then_check_kernel(const uint64_t* flag, uint64_t value, uint64_t error_value, uint64_t timeout_ns,
                                       const uint8_t* data, uint64_t length, uint64_t seed, uint64_t* result) {
  __shared__ int outcome;
  if (threadIdx.x == 0) {
    outcome = static_cast<int>(dev::wait_flag(flag, value, error_value, timeout_ns));
    result[0] = static_cast<uint64_t>(outcome);
  }
  __syncthreads();
  if (outcome != static_cast<int>(dev::FlagWait::kSet)) return;
  // The flag was read with acquire ordering: the writes' bytes, delivered before the imms that set
  // it, are visible now. Loads from mapped host memory go over PCIe; volatile keeps them uncached.
  const volatile uint8_t* bytes = data;
  for (uint64_t i = threadIdx.x; i < length; i += blockDim.x) {
    if (bytes[i] != pattern_byte(seed, i)) {
      atomicAdd(reinterpret_cast<unsigned long long*>(&result[1]), 1ull);
      atomicMin(reinterpret_cast<unsigned long long*>(&result[2]), static_cast<unsigned long long>(i));
    }
  }
}

__global__ void fill_pattern_kernel(uint8_t* data, uint64_t length, uint64_t seed) {
  for (uint64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < length; i += gridDim.x * blockDim.x) {
    data[i] = pattern_byte(seed, i);
  }
}

// Round trip i: publish i, wait for the ack. Tight spin (no sleep): the benchmark measures latency.
__global__ void roundtrip_kernel(uint64_t* word, const uint64_t* ack, uint64_t* counter, long long* cycles,
                                 uint64_t* gt_ns, uint64_t timeout_ns, int* timed_out) {
  if (*timed_out) return;  // one lost ack fails the run; the rest must not each wait a timeout
  const uint64_t i = ++*counter;
  const uint64_t g0 = dev::globaltimer_ns();
  const long long c0 = clock64();
  dev::store_release(word, i);
  uint32_t spins = 0;
  while (dev::load_acquire(ack) != i) {
    if (++spins % 4096 == 0 && dev::globaltimer_ns() - g0 > timeout_ns) {
      *timed_out = 1;
      return;
    }
  }
  const long long c1 = clock64();
  const uint64_t g1 = dev::globaltimer_ns();
  cycles[i - 1] = c1 - c0;
  gt_ns[i - 1] = g1 - g0;
}

// SM cycles per globaltimer ns over ~`ns`, to convert clock64 samples.
__global__ void calibrate_kernel(uint64_t ns, double* cycles_per_ns) {
  const uint64_t g0 = dev::globaltimer_ns();
  const long long c0 = clock64();
  uint64_t g1;
  while ((g1 = dev::globaltimer_ns()) - g0 < ns) {
  }
  const long long c1 = clock64();
  *cycles_per_ns = static_cast<double>(c1 - c0) / static_cast<double>(g1 - g0);
}

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

}  // namespace

int launch_layer_bumps(uint64_t* word, uint64_t* epoch, int layers, uint32_t busy_ns, void* stream) {
  layer_bumps_kernel<<<1, 1, 0, as_stream(stream)>>>(word, epoch, layers, busy_ns);
  return static_cast<int>(cudaGetLastError());
}

int launch_flag_then_check(const uint64_t* flag, uint64_t value, uint64_t error_value, uint64_t timeout_ns,
                           const uint8_t* data, uint64_t length, uint64_t seed, uint64_t* result, void* stream) {
  const uint64_t init[3] = {0, 0, UINT64_MAX};
  cudaError_t e = cudaMemcpyAsync(result, init, sizeof(init), cudaMemcpyHostToDevice, as_stream(stream));
  if (e != cudaSuccess) return static_cast<int>(e);
  flag_then_check_kernel<<<1, 256, 0, as_stream(stream)>>>(flag, value, error_value, timeout_ns, data, length, seed, result);
  return static_cast<int>(cudaGetLastError());
}

int launch_fill_pattern(uint8_t* data, uint64_t length, uint64_t seed, void* stream) {
  fill_pattern_kernel<<<264, 256, 0, as_stream(stream)>>>(data, length, seed);
  return static_cast<int>(cudaGetLastError());
}

const char* error_text(int error) { return cudaGetErrorString(static_cast<cudaError_t>(error)); }

}  // namespace fabric_lib::device_tests

extern "C" int fl_roundtrip_run(uint64_t* word, const uint64_t* ack, int iterations, int use_graph, uint64_t timeout_ns,
                                double* out_ns, double* out_globaltimer_ns) {
  using namespace fabric_lib::device_tests;
  if (iterations <= 0 || !out_ns) return static_cast<int>(cudaErrorInvalidValue);
  cudaStream_t stream = nullptr;
  uint64_t* counter = nullptr;
  long long* cycles = nullptr;
  uint64_t* gt = nullptr;
  int* timed_out = nullptr;
  double* cal = nullptr;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  int rc = 0;
  double cal_host[2] = {0, 0};
  int timed_out_host = 0;
  std::vector<long long> c(iterations);
  std::vector<uint64_t> g(iterations);
  auto check = [&](cudaError_t e) {
    if (e != cudaSuccess && rc == 0) rc = static_cast<int>(e);
    return rc == 0;
  };
  if (!check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking))) goto done;
  if (!check(cudaMalloc(&counter, sizeof(uint64_t)))) goto done;
  if (!check(cudaMalloc(&cycles, sizeof(long long) * iterations))) goto done;
  if (!check(cudaMalloc(&gt, sizeof(uint64_t) * iterations))) goto done;
  if (!check(cudaMalloc(&timed_out, sizeof(int)))) goto done;
  if (!check(cudaMalloc(&cal, 2 * sizeof(double)))) goto done;
  if (!check(cudaMemsetAsync(counter, 0, sizeof(uint64_t), stream))) goto done;
  if (!check(cudaMemsetAsync(timed_out, 0, sizeof(int), stream))) goto done;
  calibrate_kernel<<<1, 1, 0, stream>>>(20'000'000, cal);
  if (!check(cudaGetLastError())) goto done;
  if (use_graph) {
    if (!check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal))) goto done;
    roundtrip_kernel<<<1, 1, 0, stream>>>(word, ack, counter, cycles, gt, timeout_ns, timed_out);
    if (!check(cudaStreamEndCapture(stream, &graph))) goto done;
    if (!check(cudaGraphInstantiate(&exec, graph, 0))) goto done;
    for (int i = 0; i < iterations; ++i) {
      if (!check(cudaGraphLaunch(exec, stream))) goto done;
    }
  } else {
    for (int i = 0; i < iterations; ++i) {
      roundtrip_kernel<<<1, 1, 0, stream>>>(word, ack, counter, cycles, gt, timeout_ns, timed_out);
      if (!check(cudaGetLastError())) goto done;
    }
  }
  calibrate_kernel<<<1, 1, 0, stream>>>(20'000'000, cal + 1);
  if (!check(cudaGetLastError())) goto done;
  if (!check(cudaStreamSynchronize(stream))) goto done;
  if (!check(cudaMemcpy(&timed_out_host, timed_out, sizeof(int), cudaMemcpyDeviceToHost))) goto done;
  if (timed_out_host) {
    rc = -1;
    goto done;
  }
  if (!check(cudaMemcpy(c.data(), cycles, sizeof(long long) * iterations, cudaMemcpyDeviceToHost))) goto done;
  if (!check(cudaMemcpy(g.data(), gt, sizeof(uint64_t) * iterations, cudaMemcpyDeviceToHost))) goto done;
  if (!check(cudaMemcpy(cal_host, cal, sizeof(cal_host), cudaMemcpyDeviceToHost))) goto done;
  {
    const double cycles_per_ns = (cal_host[0] + cal_host[1]) / 2;
    for (int i = 0; i < iterations; ++i) {
      out_ns[i] = static_cast<double>(c[i]) / cycles_per_ns;
      if (out_globaltimer_ns) out_globaltimer_ns[i] = static_cast<double>(g[i]);
    }
  }
done:
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  if (stream) cudaStreamSynchronize(stream);
  cudaFree(counter);
  cudaFree(cycles);
  cudaFree(gt);
  cudaFree(timed_out);
  cudaFree(cal);
  if (stream) cudaStreamDestroy(stream);
  return rc;
}

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "benchmarks.h"
#include "device_support.h"
#include "kernels.h"

namespace fabric_lib::device_tests {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kRegion = 64 << 20;
constexpr uint64_t kInflightBytes = 32 << 20;
constexpr std::chrono::milliseconds kDuration{600};

// Keeps up to kInflightBytes of writes of `size` in flight for kDuration; returns GB/s
// (completed bytes; a write completes when delivered: tcp and shm grant delivery-complete).
double measure(TransferEngine& engine, MrHandle src, const MrDesc& dst, uint64_t size) {
  const uint64_t window = std::max<uint64_t>(1, std::min<uint64_t>(64, kInflightBytes / size));
  const uint64_t slots = kRegion / size;
  CompletionCounter done;
  uint64_t submitted = 0;
  auto submit_until = [&](uint64_t target) {
    while (submitted < target) {
      const uint64_t off = (submitted % slots) * size;
      if (!engine.submit_write({src, off, dst, off, size}, Completion::counter(done)).ok()) return false;
      ++submitted;
    }
    return true;
  };
  // Warm-up: one window.
  if (!submit_until(window) || !done.wait_for(window, std::chrono::seconds(30))) return -1;
  const uint64_t base = done.finished();
  const auto start = Clock::now();
  while (Clock::now() - start < kDuration) {
    if (!submit_until(done.finished() + window)) return -1;
  }
  if (!done.wait_for(submitted, std::chrono::seconds(60)) || done.errors.load() != 0) return -1;
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return static_cast<double>((done.finished() - base) * size) / seconds / 1e9;
}

}  // namespace

int run_staging_benchmark(const char* csv_path) {
  FILE* csv = std::fopen(csv_path, "w");
  if (csv) std::fprintf(csv, "provider,size_bytes,host_gbps,gpu_staged_gbps,ratio_gpu_over_host\n");
  std::printf("%-5s %10s %10s %16s %8s\n", "prov", "size", "host_GB/s", "gpu_staged_GB/s", "ratio");
  int rc = 0;
  for (const char* provider : {"tcp", "shm"}) {
    const testing::ProviderConfig config = provider_config(provider, 1);
    testing::AgentProcess agent(config, kRegion);
    TransferEngineBuilder builder = config.builder();
    builder.idle_policy(IdlePolicy::kSpin);
    Result<std::unique_ptr<TransferEngine>> engine = builder.build();
    DeviceBuffer gpu(kRegion);
    std::vector<uint8_t> host(kRegion, 1);
    if (!agent.started() || !engine.ok() || !gpu.ptr) {
      std::fprintf(stderr, "%s: set-up failed (%s)\n", provider, engine.ok() ? "agent or cudaMalloc" : engine.status().to_string().c_str());
      rc = 1;
      continue;
    }
    launch_fill_pattern(gpu.bytes(), kRegion, 5, nullptr);
    cudaDeviceSynchronize();
    Result<MrRegistration> h = (*engine)->register_memory(host.data(), kRegion, Access::kLocalOnly);
    Result<MrRegistration> g = (*engine)->register_memory(gpu.ptr, kRegion, Access::kLocalOnly, MemoryKind::kCuda);
    if (!h.ok() || !g.ok()) {
      std::fprintf(stderr, "%s: registration failed: %s\n", provider, (!h.ok() ? h : g).status().to_string().c_str());
      rc = 1;
      continue;
    }
    for (uint64_t size : {uint64_t{64} << 10, uint64_t{1} << 20, uint64_t{8} << 20}) {
      const double host_gbps = measure(**engine, h->handle, agent.desc(), size);
      const double gpu_gbps = measure(**engine, g->handle, agent.desc(), size);
      if (host_gbps <= 0 || gpu_gbps <= 0) rc = 1;
      const double ratio = host_gbps > 0 ? gpu_gbps / host_gbps : 0;
      std::printf("%-5s %10llu %10.2f %16.2f %8.2f\n", provider, static_cast<unsigned long long>(size), host_gbps, gpu_gbps, ratio);
      if (csv) std::fprintf(csv, "%s,%llu,%.3f,%.3f,%.3f\n", provider, static_cast<unsigned long long>(size), host_gbps, gpu_gbps, ratio);
    }
    // The staged bytes really arrived (the last GPU pass wrote the whole region, 8 MiB at a time).
    if (agent.hash(0, kRegion) != device_hash_hex(gpu.ptr, kRegion)) {
      std::fprintf(stderr, "%s: the target's bytes differ from the GPU source after the run\n", provider);
      rc = 1;
    }
    (*engine)->stop();
  }
  if (csv) std::fclose(csv);
  return rc;
}

}  // namespace fabric_lib::device_tests

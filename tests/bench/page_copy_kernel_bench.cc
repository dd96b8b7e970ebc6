// page-copy-kernel-bench: the ipc backend's page-copy kernel alone (CUDA builds only).
//
// fabric-bench --provider ipc --mode paged measures a paged write end to end — submit, the
// worker, the copy engine's flush and launch, the completion word, the imm — against one
// contiguous cudaMemcpyPeerAsync of the same bytes. When it reads below that copy, this says how
// much of the gap is the kernel's own: the same launches (gpu::launch_page_copy, one per request
// of --pages scattered pages over a --region-mib region on both sides, their page index pairs in
// pinned host memory as the copy engine keeps a paged write's, or 16-byte offset pairs as it
// keeps other gathers', or those in device memory for comparison), issued
// straight from one thread with --window requests in flight over --streams streams, against
// contiguous cudaMemcpyAsync copies of the same bytes in the same run and the same windows. No
// engine, no worker, no completion words: what is left is the GPU's side.
//
// After the timed runs one request is checked byte for byte (every page at its target, nothing
// else written); a wrong byte makes the exit code 1. A benchmark, not a test: it needs a CUDA
// device (scripts/device-test.sh's ipcprofile step runs it); CI only compiles it.
//
// Usage: page-copy-kernel-bench [--pages 4096] [--page-size 4096] [--window 4] [--streams 1,4]
//                               [--loads 4,8] [--region-mib 2048] [--requests 400] [--repeats 3]
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "gpu/page_copy_kernel.h"

namespace fabric_lib {
namespace {

using Clock = std::chrono::steady_clock;
using gpu::PageCopyLaunch;
using gpu::PageCopyPair;
using gpu::PageCopySegment;

struct Options {
  uint32_t pages = 4096;
  uint64_t page_size = 4096;
  size_t window = 4;
  std::vector<int> streams = {1, 4};
  std::vector<uint32_t> loads = {4, 8};
  uint64_t region_mib = 2048;
  size_t requests = 400;
  int repeats = 3;
};

bool ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "page-copy-kernel-bench: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

// Device and pinned memory for the whole run; freed at exit.
struct Buffers {
  uint8_t* src = nullptr;
  uint8_t* dst = nullptr;
  PageCopySegment* pinned = nullptr;   // `sets` request-sized offset-pair lists
  PageCopySegment* device = nullptr;   // the same lists in device memory
  PageCopyPair* pinned_pages = nullptr;  // the same requests as page index pairs (pinned)
  PageCopyPair* device_pages = nullptr;  // and in device memory
  std::vector<cudaStream_t> streams;
  std::vector<cudaEvent_t> events;     // one per request of a timed run
  ~Buffers() {
    for (cudaEvent_t e : events) cudaEventDestroy(e);
    for (cudaStream_t s : streams) cudaStreamDestroy(s);
    cudaFree(src);
    cudaFree(dst);
    cudaFreeHost(pinned);
    cudaFree(device);
    cudaFreeHost(pinned_pages);
    cudaFree(device_pages);
  }
};

// Best of `repeats` runs of `requests` requests, `window` in flight, request i on stream
// i % streams: microseconds per request.
template <typename Issue>
double time_requests(Buffers& b, const Options& o, int streams, Issue&& issue) {
  double best = 1e300;
  for (int rep = 0; rep < o.repeats; ++rep) {
    if (!ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize")) return -1;
    const auto t0 = Clock::now();
    for (size_t i = 0; i < o.requests; ++i) {
      if (i >= o.window && !ok(cudaEventSynchronize(b.events[i - o.window]), "cudaEventSynchronize")) return -1;
      cudaStream_t s = b.streams[i % static_cast<size_t>(streams)];
      if (!ok(issue(i, s), "issue") || !ok(cudaEventRecord(b.events[i], s), "cudaEventRecord")) return -1;
    }
    if (!ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize")) return -1;
    best = std::min(best, std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / static_cast<double>(o.requests));
  }
  return best;
}

int run(const Options& o) {
  const uint64_t region = o.region_mib << 20;
  const uint64_t slots = region / o.page_size;
  const uint64_t request_bytes = uint64_t{o.pages} * o.page_size;
  if (o.pages == 0 || o.page_size == 0 || o.page_size % 16 != 0 || slots < o.pages || o.window == 0 || o.requests <= o.window) {
    std::fprintf(stderr, "page-copy-kernel-bench: need pages > 0, a page size that is a multiple of 16, "
                         "a region of at least one request and more requests than the window\n");
    return 2;
  }
  Buffers b;
  // Offset-pair lists for `sets` requests: disjoint random pages of the region on both sides.
  const size_t sets = std::max<size_t>(1, std::min<uint64_t>(64, slots / o.pages));
  std::vector<uint32_t> src_perm(slots), dst_perm(slots);
  std::iota(src_perm.begin(), src_perm.end(), 0u);
  std::iota(dst_perm.begin(), dst_perm.end(), 0u);
  std::mt19937 rng(7);
  std::shuffle(src_perm.begin(), src_perm.end(), rng);
  std::shuffle(dst_perm.begin(), dst_perm.end(), rng);
  const size_t pair_bytes = sets * o.pages * sizeof(PageCopySegment);
  const size_t page_pair_bytes = sets * o.pages * sizeof(PageCopyPair);
  if (!ok(cudaMalloc(&b.src, region), "cudaMalloc") || !ok(cudaMalloc(&b.dst, region), "cudaMalloc") ||
      !ok(cudaHostAlloc(&b.pinned, pair_bytes, cudaHostAllocPortable | cudaHostAllocMapped), "cudaHostAlloc") ||
      !ok(cudaMalloc(&b.device, pair_bytes), "cudaMalloc") ||
      !ok(cudaHostAlloc(&b.pinned_pages, page_pair_bytes, cudaHostAllocPortable | cudaHostAllocMapped), "cudaHostAlloc") ||
      !ok(cudaMalloc(&b.device_pages, page_pair_bytes), "cudaMalloc")) {
    return 2;
  }
  for (size_t k = 0; k < sets * o.pages; ++k) {
    b.pinned[k] = {src_perm[k] * o.page_size, dst_perm[k] * o.page_size};
    b.pinned_pages[k] = {src_perm[k], dst_perm[k]};
  }
  if (!ok(cudaMemcpy(b.device, b.pinned, pair_bytes, cudaMemcpyHostToDevice), "cudaMemcpy") ||
      !ok(cudaMemcpy(b.device_pages, b.pinned_pages, page_pair_bytes, cudaMemcpyHostToDevice), "cudaMemcpy") ||
      !ok(cudaMemset(b.src, 0x5a, region), "cudaMemset") || !ok(cudaMemset(b.dst, 0, region), "cudaMemset")) {
    return 2;
  }
  const int max_streams = *std::max_element(o.streams.begin(), o.streams.end());
  b.streams.resize(static_cast<size_t>(max_streams));
  for (cudaStream_t& s : b.streams) {
    if (!ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate")) return 2;
  }
  b.events.resize(o.requests);
  for (cudaEvent_t& e : b.events) {
    if (!ok(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate")) return 2;
  }
  // Request i's launch: its pages as index pairs (`pages` set) or as offset pairs.
  auto launch = [&](size_t i, cudaStream_t s, uint32_t loads, const PageCopySegment* pairs, const PageCopyPair* pages) {
    PageCopyLaunch l;
    gpu::PageCopyRun& run = l.runs[0];
    run = {};
    run.src = b.src;
    run.dst = b.dst;
    run.length = static_cast<uint32_t>(o.page_size);
    run.copies = o.pages;
    if (pages) {
      run.pages = pages + (i % sets) * o.pages;
      run.src_stride = run.dst_stride = o.page_size;
      run.by_pages = 1;
    } else {
      run.segments = pairs + (i % sets) * o.pages;
    }
    l.run_count = 1;
    l.warps = static_cast<uint32_t>(o.pages * gpu::page_copy_pieces(o.page_size, l.piece_shift));
    l.loads_per_lane = loads;
    return gpu::launch_page_copy(l, s);
  };
  std::printf("page-copy-kernel-bench: %u pages of %llu bytes per request (%.1f MiB), window %zu, %zu requests, best of %d, "
              "over a %llu MiB region\n",
              o.pages, static_cast<unsigned long long>(o.page_size), static_cast<double>(request_bytes) / (1 << 20), o.window,
              o.requests, o.repeats, static_cast<unsigned long long>(o.region_mib));
  std::printf("%-52s %7s %12s %10s %9s\n", "copy", "streams", "us/request", "Gbps", "ratio");
  const uint64_t contiguous_slots = region / request_bytes;
  for (int streams : o.streams) {
    const double base = time_requests(b, o, streams, [&](size_t i, cudaStream_t s) {
      const uint64_t off = (i % contiguous_slots) * request_bytes;
      return cudaMemcpyAsync(b.dst + off, b.src + off, request_bytes, cudaMemcpyDeviceToDevice, s);
    });
    if (base < 0) return 2;
    auto row = [&](const std::string& name, double us) {
      std::printf("%-52s %7d %12.2f %10.0f %8.2fx\n", name.c_str(), streams, us, static_cast<double>(request_bytes) * 8 / us / 1e3,
                  base / us);
    };
    row("contiguous cudaMemcpyAsync (baseline)", base);
    for (uint32_t loads : o.loads) {
      for (bool by_pages : {true, false}) {
        for (bool on_device : {false, true}) {
          const PageCopySegment* pairs = on_device ? b.device : b.pinned;
          const PageCopyPair* pages = by_pages ? (on_device ? b.device_pages : b.pinned_pages) : nullptr;
          const double us =
              time_requests(b, o, streams, [&](size_t i, cudaStream_t s) { return launch(i, s, loads, pairs, pages); });
          if (us < 0) return 2;
          row("page-copy kernel, " + std::to_string(loads) + " loads, " + (by_pages ? "page" : "offset") + " pairs in " +
                  (on_device ? "device" : "pinned"),
              us);
        }
      }
    }
  }
  // One request checked byte for byte, in both forms: its pages at their targets, every other
  // byte untouched.
  std::vector<uint8_t> pattern(o.page_size);
  for (size_t k = 0; k < pattern.size(); ++k) pattern[k] = static_cast<uint8_t>(k * 131 + 7);
  for (uint32_t p = 0; p < o.pages; ++p) {
    if (!ok(cudaMemcpy(b.src + b.pinned[p].src_offset, pattern.data(), o.page_size, cudaMemcpyHostToDevice), "cudaMemcpy")) return 2;
  }
  std::vector<bool> target(slots, false);
  for (uint32_t p = 0; p < o.pages; ++p) target[b.pinned[p].dst_offset / o.page_size] = true;
  std::vector<uint8_t> landed(region);
  uint64_t wrong = 0;
  for (bool by_pages : {true, false}) {
    if (!ok(cudaMemset(b.dst, 0, region), "cudaMemset") ||
        !ok(launch(0, b.streams[0], o.loads.back(), b.pinned, by_pages ? b.pinned_pages : nullptr), "launch") ||
        !ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize") ||
        !ok(cudaMemcpy(landed.data(), b.dst, region, cudaMemcpyDeviceToHost), "cudaMemcpy")) {
      return 2;
    }
    for (uint64_t slot = 0; slot < slots; ++slot) {
      const uint8_t* at = landed.data() + slot * o.page_size;
      if (target[slot]) {
        wrong += std::memcmp(at, pattern.data(), o.page_size) != 0;
      } else {
        wrong += std::any_of(at, at + o.page_size, [](uint8_t v) { return v != 0; });
      }
    }
  }
  std::printf("page-copy-kernel-bench: verification %s (%llu of 2 x %llu pages wrong: page pairs, then offset pairs)\n",
              wrong ? "FAILED" : "passed", static_cast<unsigned long long>(wrong), static_cast<unsigned long long>(slots));
  return wrong ? 1 : 0;
}

}  // namespace
}  // namespace fabric_lib

int main(int argc, char** argv) {
  fabric_lib::Options o;
  CLI::App app{"page-copy-kernel-bench: the ipc page-copy kernel alone against a contiguous copy of the same bytes"};
  app.add_option("--pages", o.pages, "pages per request")->check(CLI::PositiveNumber);
  app.add_option("--page-size", o.page_size, "bytes per page (a multiple of 16)")->check(CLI::PositiveNumber);
  app.add_option("--window", o.window, "requests in flight")->check(CLI::PositiveNumber);
  app.add_option("--streams", o.streams, "stream counts to run (requests go round-robin)")->delimiter(',')->check(CLI::Range(1, 64));
  app.add_option("--loads", o.loads, "16-byte loads per lane the kernel keeps in flight (4, 8)")->delimiter(',')->check(CLI::IsMember({4u, 8u}));
  app.add_option("--region-mib", o.region_mib, "MiB of device memory on each side (pages are spread over it)")->check(CLI::PositiveNumber);
  app.add_option("--requests", o.requests, "requests per timed run")->check(CLI::PositiveNumber);
  app.add_option("--repeats", o.repeats, "runs per row (the best counts)")->check(CLI::Range(1, 100));
  CLI11_PARSE(app, argc, argv);
  return fabric_lib::run(o);
}

#include "gpu/page_copy_kernel.h"

namespace fabric_lib::gpu {
namespace {

// One warp per piece, 8 pieces per block. A block per piece (as before 2026-12-03) ran 4096
// pieces of 4 KiB in waves of ~1000 blocks, each wave waiting out a read of its pieces from
// pinned host memory and a system-wide fence: 24.6 us on one H200. With a warp per piece every
// piece of a 4096-page request is in flight at once, and the host memory is read once per warp.
constexpr uint32_t kThreads = 256;
constexpr uint32_t kWarps = kThreads / 32;
constexpr uint64_t kWarpStep = 32 * 16;  // bytes one warp moves with one 16-byte access per lane

template <int kLoads, uint32_t kRuns>
__global__ void page_copy_kernel(const __grid_constant__ PageCopyParams<kRuns> launch) {
  const uint32_t warp = blockIdx.x * kWarps + threadIdx.x / 32;
  if (warp >= launch.warps) return;  // whole warps leave: the shuffles below see full warps only
  const uint32_t lane = threadIdx.x % 32;
  // This warp's run: the last one starting at or before it (the same for every lane).
  uint32_t lo = 0, hi = launch.run_count;
  while (hi - lo > 1) {
    const uint32_t mid = (lo + hi) / 2;
    if (launch.runs[mid].first_warp <= warp) lo = mid;
    else hi = mid;
  }
  const PageCopyRun& run = launch.runs[lo];
  const uint32_t shift = launch.piece_shift;
  const uint64_t piece_bytes = uint64_t{1} << shift;
  const uint32_t pieces = static_cast<uint32_t>((run.length + piece_bytes - 1) >> shift);
  const uint32_t k = warp - run.first_warp;
  const uint32_t copy = k / pieces;
  const uint64_t at = uint64_t{k % pieces} << shift;
  // The pair lives in host memory: two lanes read its two words at once (one round trip over
  // PCIe), the warp shares them. Page pairs are indices, scaled here by the run's strides.
  uint64_t word = 0;
  if (lane < 2) {
    if (run.by_pages) {
      const uint32_t* pair = &run.pages[copy].src_page;
      word = uint64_t{pair[lane]} * (lane == 0 ? run.src_stride : run.dst_stride);
    } else {
      word = lane == 0 ? run.segments[copy].src_offset : run.segments[copy].dst_offset;
    }
  }
  const uint64_t src_offset = __shfl_sync(0xffffffffu, word, 0);
  const uint64_t dst_offset = __shfl_sync(0xffffffffu, word, 1);
  const auto* src = reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(run.src) + src_offset + at);
  auto* dst = reinterpret_cast<uint8_t*>(reinterpret_cast<uintptr_t>(run.dst) + dst_offset + at);
  const uint64_t length = run.length - at < piece_bytes ? run.length - at : piece_bytes;
  const bool aligned = ((reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst)) & 15) == 0;
  if (!aligned) {
    for (uint64_t t = lane; t < length; t += 32) dst[t] = src[t];
    return;
  }
  const uint64_t whole = length / 16 * 16;
  uint64_t i = uint64_t{lane} * 16;
  // kLoads loads in flight per lane before their stores (a 4 KiB page: 8 in all).
  for (; i + (kLoads - 1) * kWarpStep < whole; i += kLoads * kWarpStep) {
    uint4 v[kLoads];
#pragma unroll
    for (int l = 0; l < kLoads; ++l) v[l] = __ldg(reinterpret_cast<const uint4*>(src + i + l * kWarpStep));
#pragma unroll
    for (int l = 0; l < kLoads; ++l) *reinterpret_cast<uint4*>(dst + i + l * kWarpStep) = v[l];
  }
  for (; i < whole; i += kWarpStep) *reinterpret_cast<uint4*>(dst + i) = __ldg(reinterpret_cast<const uint4*>(src + i));
  for (uint64_t t = whole + lane; t < length; t += 32) dst[t] = src[t];  // < 16 bytes
  // No fence: the bytes are only announced (imm record, event) after the host saw the launch
  // complete (cudaEventQuery), and a completed kernel's writes are visible to every later
  // reader, in this process or another, on the GPU or the host. A __threadfence_system() per
  // block cost ~40 % of a 4096-page launch.
}

// Launches the kernel with the smallest parameter block that holds `launch`'s runs.
template <uint32_t kRuns>
cudaError_t launch_with(const PageCopyLaunch& launch, uint32_t blocks, cudaStream_t stream) {
  PageCopyParams<kRuns> p{};
  static_cast<PageCopyShape&>(p) = launch;
  for (uint32_t r = 0; r < launch.run_count; ++r) p.runs[r] = launch.runs[r];
  if (launch.loads_per_lane == 8) page_copy_kernel<8, kRuns><<<blocks, kThreads, 0, stream>>>(p);
  else page_copy_kernel<4, kRuns><<<blocks, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

// The parameter blocks' sizes in runs: one, a few, all.
constexpr uint32_t kFewRuns = 8;

template <uint32_t kRuns>
cudaError_t load_kernels_of() {
  cudaFuncAttributes attr;
  cudaError_t e = cudaFuncGetAttributes(&attr, page_copy_kernel<4, kRuns>);
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&attr, page_copy_kernel<8, kRuns>);
  return e;
}

}  // namespace

cudaError_t load_page_copy_kernel() {
  cudaError_t e = load_kernels_of<1>();
  if (e == cudaSuccess) e = load_kernels_of<kFewRuns>();
  if (e == cudaSuccess) e = load_kernels_of<kMaxPageCopyRuns>();
  return e;
}

cudaError_t launch_page_copy(const PageCopyLaunch& launch, cudaStream_t stream) {
  if (launch.warps == 0 || launch.run_count == 0) return cudaSuccess;
  if (launch.piece_shift < kPageCopyMinPieceShift || launch.piece_shift > 30) return cudaErrorInvalidValue;
  // Only the two compiled shapes; any other count is refused (the flush's copies then fail with
  // this error) rather than run as one of them.
  if (launch.loads_per_lane != 4 && launch.loads_per_lane != 8) return cudaErrorInvalidValue;
  if (launch.run_count > kMaxPageCopyRuns) return cudaErrorInvalidValue;
  const uint32_t blocks = (launch.warps + kWarps - 1) / kWarps;
  if (launch.run_count == 1) return launch_with<1>(launch, blocks, stream);
  if (launch.run_count <= kFewRuns) return launch_with<kFewRuns>(launch, blocks, stream);
  return launch_with<kMaxPageCopyRuns>(launch, blocks, stream);
}

}  // namespace fabric_lib::gpu

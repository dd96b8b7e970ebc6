// A gather/scatter copy kernel for batches of small copies (CUDA builds only). One launch moves
// every small copy of a flush — thousands of pages — because a launch costs the worker
// microseconds, which for 4 KiB pages is more than the copy. It replaces one cudaMemcpyAsync per
// page when a paged write posts many small pages (cuda_copy_engine.h says when).
//
// What the GPU reads: the launch's runs travel in the kernel's parameters (constant memory, no
// round trip over PCIe); each run's copies are 8-byte page index pairs (a paged write's pages,
// which the kernel scales by the run's strides) or 16-byte offset pairs, in pinned host memory. Every copy is split into pieces
// of at most 1 << PageCopyLaunch::piece_shift bytes (16 KiB unless the engine asks for more
// warps), one warp per piece, with 16-byte accesses where both ends are aligned. (Until 2026-12-03 the host wrote a 24-byte pointer/length triple per piece; on one
// H200's host that fill took 15-25 us of a 4096-page request's CPU time.)
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "gpu/copy_mode.h"

namespace fabric_lib::gpu {

// One copy of a run: `length` bytes from run.src + src_offset to run.dst + dst_offset. Laid out
// as CopySegment (copy_engine.h), so a gather request's segments are copied as they are.
struct PageCopySegment {
  uint64_t src_offset;
  uint64_t dst_offset;
};

// One copy of a run by pages: length bytes from run.src + src_page * run.src_stride to
// run.dst + dst_page * run.dst_stride. Laid out as CopyPagePair (copy_engine.h).
struct PageCopyPair {
  uint32_t src_page;
  uint32_t dst_page;
};

// Copies of one length from one source base to one target base. A run of plain copies (each its
// own source and target) has null bases and the copies' addresses as offsets.
struct PageCopyRun {
  const uint8_t* src;
  uint8_t* dst;
  union {
    const PageCopySegment* segments;  // `copies` offset pairs, device-readable (pinned host memory)
    const PageCopyPair* pages;        // or (by_pages) `copies` page index pairs, the same
  };
  uint64_t src_stride;               // by_pages: the bytes between two source pages
  uint64_t dst_stride;               // by_pages: the same at the target
  uint32_t length;                   // bytes of each copy (> 0)
  uint32_t copies;
  uint32_t first_warp;               // warps of the launch's earlier runs
  uint32_t by_pages;                 // 1: `pages`, 0: `segments`
};

// Bytes per piece: 1 << shift, a multiple of 16, so aligned copies stay aligned piece by piece.
// The engine uses kPageCopyPieceShift (16 KiB) unless CudaCopyEngine::Options::min_launch_warps
// asks for more warps per launch (a diagnosis setting: on one H100 smaller pieces measured no
// gain, docs/gpu.md); it then cuts pieces as small as 1 << kPageCopyMinPieceShift (2 KiB).
inline constexpr uint32_t kPageCopyPieceShift = 14;
inline constexpr uint32_t kPageCopyMinPieceShift = 11;
// Runs one launch carries in its parameters (64 * 56 B: inside the 4 KiB a launch may pass).
inline constexpr uint32_t kMaxPageCopyRuns = 64;

static_assert(sizeof(PageCopyRun) == 56, "the launch's parameters must stay within 4 KiB");

// What a launch says besides its runs.
struct PageCopyShape {
  uint32_t run_count = 0;
  uint32_t warps = 0;  // one per piece of every run
  uint32_t piece_shift = kPageCopyPieceShift;  // pieces of 1 << piece_shift bytes
  uint32_t loads_per_lane = kDefaultCopyLoadsPerLane;  // 16-byte loads a lane keeps in flight: 4 or 8
};

// A launch's parameter block: its shape and room for kRuns runs. The driver copies the whole
// block into the stream's queue on every launch, so launch_page_copy passes the kernel the
// smallest of 1, 8 or 64 runs that holds run_count (72 bytes for one run, 3.6 KB for 64).
template <uint32_t kRuns>
struct PageCopyParams : PageCopyShape {
  PageCopyRun runs[kRuns];
};

// A launch as the copy engine builds it: room for every run a launch may carry.
using PageCopyLaunch = PageCopyParams<kMaxPageCopyRuns>;
static_assert(sizeof(PageCopyParams<1>) == 72, "a one-run launch passes its shape and one run");

// How many pieces (warps) a copy of `length` bytes becomes (at least 1).
inline uint64_t page_copy_pieces(uint64_t length, uint32_t shift = kPageCopyPieceShift) {
  return length == 0 ? 1 : (length + (uint64_t{1} << shift) - 1) >> shift;
}

// Launches the kernel over `launch`'s runs on `stream` (whose device must reach every source and
// target, and the runs' segments). The segments must stay untouched until the launch is complete.
// cudaErrorInvalidValue, with nothing launched, for a piece shift or a loads_per_lane the kernel
// does not have (shifts kPageCopyMinPieceShift..30; 4 or 8 loads).
cudaError_t launch_page_copy(const PageCopyLaunch& launch, cudaStream_t stream);

// Loads the kernel into the current device's context now. CUDA 12+ loads a module lazily at its
// first launch, and that load waits for every kernel already running in the context: a first
// page copy launched while an application kernel spins waiting for this very copy (an MoE
// receive, a KV layer wait) would never return. Registration of CUDA memory calls this.
cudaError_t load_page_copy_kernel();

}  // namespace fabric_lib::gpu

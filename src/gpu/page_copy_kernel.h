// A gather/scatter copy kernel for batches of small copies (CUDA builds only). The host splits
// every copy into pieces of at most kPageCopyPieceBytes (split_page_copy) and writes the pieces
// into a buffer the GPU can read (pinned host memory); one launch then moves all of them, one
// warp per piece, with 16-byte accesses where both ends are aligned. It replaces one
// cudaMemcpyAsync per page when a paged write posts many small pages (cuda_copy_engine.h says
// when). One launch serves a whole flush — thousands of pages — because a launch costs the
// worker microseconds, which for 4 KiB pages is more than the copy.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace fabric_lib::gpu {

// One warp's share of a copy.
struct PageCopyPiece {
  const uint8_t* src;
  uint8_t* dst;
  uint64_t length;
};

// Bytes per piece: a multiple of 16, so aligned copies stay aligned piece by piece.
inline constexpr uint64_t kPageCopyPieceBytes = 16 * 1024;

// How many pieces a copy of `length` bytes becomes (at least 1).
inline uint64_t page_copy_pieces(uint64_t length) {
  return length == 0 ? 1 : (length + kPageCopyPieceBytes - 1) / kPageCopyPieceBytes;
}

// Writes the pieces of one copy of `length` > 0 bytes into `out` (room for
// page_copy_pieces(length)); returns how many.
inline uint64_t split_page_copy(const uint8_t* src, uint8_t* dst, uint64_t length, PageCopyPiece* out) {
  uint64_t n = 0;
  uint64_t at = 0;
  do {
    const uint64_t len = length - at < kPageCopyPieceBytes ? length - at : kPageCopyPieceBytes;
    out[n++] = {src + at, dst + at, len};
    at += len;
  } while (at < length);
  return n;
}

// Launches the kernel over `count` pieces on `stream` (whose device must reach every src and
// dst, and `pieces`: device memory, or pinned host memory mapped for the device). `pieces` must
// stay untouched until the launch is complete.
cudaError_t launch_page_copy(const PageCopyPiece* pieces, uint32_t count, cudaStream_t stream);

// Loads the kernel into the current device's context now. CUDA 12+ loads a module lazily at its
// first launch, and that load waits for every kernel already running in the context: a first
// page copy launched while an application kernel spins waiting for this very copy (an MoE
// receive, a KV layer wait) would never return. Registration of CUDA memory calls this.
cudaError_t load_page_copy_kernel();

}  // namespace fabric_lib::gpu

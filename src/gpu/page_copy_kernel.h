// A gather/scatter copy kernel for batches of small copies (CUDA builds only): one launch moves
// up to kMaxPageCopies independent (src, dst, length) copies, each over one or more thread
// blocks, with 16-byte accesses where both ends are aligned. It replaces one cudaMemcpyAsync
// per page when a paged write posts many small pages (see cuda_copy_engine.h for when).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace fabric_lib::gpu {

struct PageCopyBatch {
  static constexpr uint32_t kMaxPageCopies = 64;
  const uint8_t* src[kMaxPageCopies];
  uint8_t* dst[kMaxPageCopies];
  uint64_t length[kMaxPageCopies];
  // Copy i runs on blocks [first_block[i], first_block[i + 1]); first_block[count] = total blocks.
  uint32_t first_block[kMaxPageCopies + 1];
  uint32_t count;
};

// Splits copy lengths into blocks (at most kMaxBlocksPerCopy per copy) and fills first_block.
void plan_page_copy_blocks(PageCopyBatch& batch);

// Launches the kernel on `stream` (whose device must reach every src and dst).
cudaError_t launch_page_copy(const PageCopyBatch& batch, cudaStream_t stream);

// Loads the kernel into the current device's context now. CUDA 12+ loads a module lazily at its
// first launch, and that load waits for every kernel already running in the context: a first
// page copy launched while an application kernel spins waiting for this very copy (an MoE
// receive, a KV layer wait) would never return. Registration of CUDA memory calls this.
cudaError_t load_page_copy_kernel();

}  // namespace fabric_lib::gpu

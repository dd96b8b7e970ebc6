#include "gpu/pinned_segment_pool.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <bit>

namespace fabric_lib::gpu {

PinnedSegmentPool::~PinnedSegmentPool() {
  for (Buffer& b : all_) cudaFreeHost(b.segments);
}

void PinnedSegmentPool::reserve(size_t count) {
  while (all_.size() < count) {
    Buffer b = allocate(min_capacity_);
    if (!b.segments) break;
    free_.push_back(b);
  }
}

PinnedSegmentPool::Buffer PinnedSegmentPool::take(size_t segments) {
  auto best = free_.end();
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->capacity >= segments && (best == free_.end() || it->capacity < best->capacity)) best = it;
  }
  if (best != free_.end()) {
    Buffer b = *best;
    *best = free_.back();
    free_.pop_back();
    return b;
  }
  return allocate(segments);
}

void PinnedSegmentPool::release(const Buffer& b) {
  if (holds_[b.id] > 0 && --holds_[b.id] == 0) free_.push_back(b);
}

void PinnedSegmentPool::give_back_unless_held(const Buffer& b) {
  if (holds_[b.id] == 0) free_.push_back(b);
}

PinnedSegmentPool::Buffer PinnedSegmentPool::allocate(size_t segments) {
  Buffer b;
  b.capacity = std::bit_ceil(std::max(segments, min_capacity_));
  void* p = nullptr;
  // Portable: any device's kernel may read it (through unified addressing, at the same address).
  if (cudaHostAlloc(&p, b.capacity * sizeof(PageCopySegment), cudaHostAllocPortable | cudaHostAllocMapped) !=
      cudaSuccess) {
    cudaGetLastError();  // not sticky; clear it
    return {};
  }
  b.segments = static_cast<PageCopySegment*>(p);
  b.id = static_cast<uint32_t>(all_.size());
  all_.push_back(b);
  holds_.push_back(0);
  return b;
}

}  // namespace fabric_lib::gpu

// Pinned host buffers of page-copy segments (offset pairs) that kernel launches read in place
// (CUDA builds only). A buffer is taken, then held by every flush whose launches read it; when
// the last hold is released it is free again. Buffers are allocated once, when no free one is
// large enough, and kept until the pool is destroyed, so steady traffic allocates nothing.
// Not thread safe: the copy engine's thread owns it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "gpu/page_copy_kernel.h"

namespace fabric_lib::gpu {

class PinnedSegmentPool {
 public:
  struct Buffer {
    PageCopySegment* segments = nullptr;  // null: no pinned memory could be had
    size_t capacity = 0;                  // in segments
    uint32_t id = 0;                      // the pool's index of it
  };

  // New buffers hold at least `min_capacity` segments (rounded up to a power of two).
  explicit PinnedSegmentPool(size_t min_capacity) : min_capacity_(min_capacity) {}
  ~PinnedSegmentPool();
  PinnedSegmentPool(const PinnedSegmentPool&) = delete;
  PinnedSegmentPool& operator=(const PinnedSegmentPool&) = delete;

  // Allocates free buffers until the pool has `count` (best effort: stops at the first failure).
  void reserve(size_t count);
  // The smallest free buffer of at least `segments`, else a new one; a buffer with null segments
  // when pinned memory cannot be had. It is the caller's until given back or released.
  Buffer take(size_t segments);
  // One more reader of a taken buffer.
  void hold(const Buffer& b) { ++holds_[b.id]; }
  // One reader fewer; at none the buffer is free again.
  void release(const Buffer& b);
  // A taken buffer goes back unless something holds it (then its last release frees it).
  void give_back_unless_held(const Buffer& b);

 private:
  // A newly allocated one, kept in all_ until the destructor.
  Buffer allocate(size_t segments);

  size_t min_capacity_;
  std::vector<Buffer> free_;
  std::vector<Buffer> all_;       // freed by the destructor
  std::vector<uint32_t> holds_;   // per buffer: readers in flight
};

}  // namespace fabric_lib::gpu

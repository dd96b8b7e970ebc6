// CopyEngine: the one interface through which transports move bytes asynchronously between
// memories without the network — the same-host IPC backend's writes into another process's
// memory, and the staging decorator's copies of GPU sources into pinned host buffers. Behind an
// interface so the callers' bookkeeping (ops, imms, events) is the same for every kind of memory
// and runs, and is tested, without a GPU. Implementations:
//   - CudaCopyEngine (cuda_copy_engine.h, CUDA builds): cudaMemcpyAsync, batched copies or a
//     page-copy kernel on a pool of streams per device, into any pointer of this process (a CUDA
//     IPC mapping of a peer's GPU memory, or pinned host memory);
//   - HostCopyEngine (transport/ipc/host_copy_engine.h): host memory into another process's host
//     memory with process_vm_writev (cross-memory attach).
// A copy is "done" only when its bytes are in the target's memory: the IPC backend pushes a
// WRITE's imm after that, which is how data-before-imm holds.
//
// Gather copies: a request may carry segments, equal-length pieces at offsets from its source and
// target bases, or page pairs, the same with each offset an index times a stride (a paged
// write's pages: one request, one CopyDone, one imm record, instead of one of each per page). It
// completes as one copy: ok only when every piece's bytes are at the target; any failure fails
// the whole request.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "fabric_lib/memory.h"
#include "fabric_lib/status.h"

namespace fabric_lib::gpu {

// One piece of a gather copy: `length` bytes (the request's) from src + src_offset to the
// target base + dst_offset.
struct CopySegment {
  uint64_t src_offset = 0;
  uint64_t dst_offset = 0;
};

// One piece of a gather by pages: `length` bytes from src + src_page * src_stride to the target
// base + dst_page * dst_stride (the request's strides). Half a CopySegment: a 4096-page write's
// pairs are 32 KiB for its sender's CPU to write and the page-copy kernel to read, not 64.
struct CopyPagePair {
  uint32_t src_page = 0;
  uint32_t dst_page = 0;
};

struct CopyRequest {
  uint64_t op = 0;                 // the caller's id, reported back in CopyDone
  const void* src = nullptr;
  MemoryKind src_kind = MemoryKind::kHost;
  int src_device = -1;             // kCuda sources: the CUDA device
  uint64_t length = 0;             // bytes of the copy; of each segment when there are segments
  // Empty: one copy of `length` bytes from `src` to the target base (dst_addr or dst_ptr).
  // Otherwise a gather: for each segment s, `length` bytes from src + s.src_offset to the target
  // base + s.dst_offset. Valid only during submit(): engines keep their own copy (in storage
  // they reuse, so a steady flow allocates nothing).
  std::span<const CopySegment> segments;
  // Or (segments empty) a gather by pages: for each pair p, `length` bytes from
  // src + p.src_page * src_stride to the target base + p.dst_page * dst_stride. Valid only during
  // submit(), as segments.
  std::span<const CopyPagePair> pages;
  uint64_t src_stride = 0;
  uint64_t dst_stride = 0;
  // Targets in another process's host memory (HostCopyEngine): its pid and virtual address.
  uint32_t dst_pid = 0;
  uint64_t dst_addr = 0;
  // Targets addressable in this process (CudaCopyEngine): GPU memory mapped with CUDA IPC, or
  // pinned host memory; the copy runs on a stream of `dst_device`.
  void* dst_ptr = nullptr;
  MemoryKind dst_kind = MemoryKind::kCuda;
  int dst_device = -1;
  // Nonzero: plain copies with the same value read from one region and write into one region, so
  // an engine may issue those that continue each other at both ends as one copy (CudaCopyEngine
  // does: a write sharded over several domains). 0: never merged.
  uint64_t merge_group = 0;
};

struct CopyDone {
  uint64_t op = 0;
  Status status;  // ok: every byte (of every segment) is in the target's memory
};

// Whether `r` is a gather (segments or page pairs), not one plain copy.
inline bool is_gather(const CopyRequest& r) { return !r.segments.empty() || !r.pages.empty(); }

// How many copies of `length` bytes a request makes: its segments or page pairs, or 1.
inline uint64_t segment_count(const CopyRequest& r) {
  return !r.segments.empty() ? r.segments.size() : !r.pages.empty() ? r.pages.size() : 1;
}

// Copy i's offsets from the request's source and target bases (i < segment_count(r); a plain
// copy's are 0).
inline CopySegment copy_offsets(const CopyRequest& r, size_t i) {
  if (!r.segments.empty()) return r.segments[i];
  if (!r.pages.empty()) return {uint64_t{r.pages[i].src_page} * r.src_stride, uint64_t{r.pages[i].dst_page} * r.dst_stride};
  return {};
}

enum class CopySubmit : uint8_t {
  kAccepted,  // the copy will be reported exactly once by progress()
  kAgain,     // full: call progress(), then submit again
  kFailed,    // refused (error filled in); nothing will be reported
};

class CopyEngine {
 public:
  virtual ~CopyEngine() = default;
  virtual CopySubmit submit(const CopyRequest& request, Status* error) = 0;
  // Room for a gather's `n` segments, which the caller may fill and then submit as the front of
  // the request's `segments`: an engine that keeps segments where its copies read them (the CUDA
  // engine: pinned memory the page-copy kernel reads) then takes them without copying them
  // again — a 4096-page write's 64 KiB of segments written once instead of three times. Valid
  // until the next call on the engine; a room that is not submitted is simply reused. Empty
  // (the default): no room; the caller passes segments from memory of its own, as always.
  virtual std::span<CopySegment> segment_room(size_t n) {
    (void)n;
    return {};
  }
  // The same for a gather's `n` page pairs (CopyRequest::pages), from the same room.
  virtual std::span<CopyPagePair> page_room(size_t n) {
    (void)n;
    return {};
  }
  // Starts what was submitted, moves copies along and appends the finished ones. Copies may
  // finish in any order.
  virtual void progress(std::vector<CopyDone>& done) = 0;
  // Requests accepted and not yet reported (a gather request counts once).
  virtual size_t inflight() const = 0;
  // Before the caller frees buffers or closes: waits for copies already running (bounded by
  // their size) and reports nothing more.
  virtual void drain() = 0;
};

}  // namespace fabric_lib::gpu

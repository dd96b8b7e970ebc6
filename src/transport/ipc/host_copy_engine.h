// Host-to-host copies into another process with process_vm_writev (cross-memory attach): the
// kernel copies straight into the target's pages, without the target's CPU — a one-sided write,
// like RDMA's. Copies run on the worker thread inside progress(), at most `budget_bytes` per call
// and `slice_bytes` per copy in turn, so a large copy neither stalls the worker nor holds small
// ones behind it (they overtake it: completion is unordered).
//
// Gather copies (CopyRequest::segments; a paged write's CopyRequest::pages become segments at
// submit) go out as iovec arrays, up to kMaxIov segments per process_vm_writev call: one system
// call moves up to 1024 pages, where single copies would each make their own. A call that writes less than asked (the kernel stops
// at an iovec boundary) is continued from where it stopped.
//
// Needs permission to ptrace the target (same user, and kernel.yama.ptrace_scope 0 or 1, or
// CAP_SYS_PTRACE); a refusal fails the copy with Unsupported and says so. Writes into this
// process itself use memcpy (per segment).
//
// GPU sources (once the domain has given it a DeviceReader): each slice is first read into this
// process's host memory (a bounce buffer of `bounce_bytes`, or the target itself when it is
// this process), synchronously on the worker thread, then written as above, segment by segment.
// Slower than a host source by the device-to-host copy, which is the price of the target not
// being GPU memory.
#pragma once

#include <sys/uio.h>

#include <functional>
#include <vector>

#include "gpu/copy_engine.h"

namespace fabric_lib::transport::ipc {

// Called when a domain registers host memory for remote writes: under Yama's ptrace_scope 1
// (only ancestors may attach), lets same-user processes write into this one
// (prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY)), which registering host memory for ipc peers
// asks for. Once per process; a no-op under scope 0, and no help under scopes 2 and 3.
void allow_host_writes_from_peers();

class HostCopyEngine final : public gpu::CopyEngine {
 public:
  struct Options {
    uint64_t slice_bytes = 4ull << 20;
    uint64_t budget_bytes = 16ull << 20;
    size_t max_jobs = 65536;
    uint64_t bounce_bytes = 1ull << 20;  // GPU sources: bytes read from the device per step
  };
  // Copies `length` bytes of GPU `device`'s memory at `src` into host memory at `dst` (this
  // process), returning when they are there.
  using DeviceReader = std::function<Status(void* dst, const void* src, uint64_t length, int device)>;
  HostCopyEngine() : HostCopyEngine(Options{}) {}
  explicit HostCopyEngine(Options options);

  // Segments per process_vm_writev call at most (Linux's IOV_MAX).
  static constexpr size_t kMaxIov = 1024;

  gpu::CopySubmit submit(const gpu::CopyRequest& request, Status* error) override;
  void progress(std::vector<gpu::CopyDone>& done) override;
  size_t inflight() const override { return count_; }
  void drain() override { head_ = count_ = 0; }
  // Enables GPU sources (without a reader they are refused with Unsupported).
  void set_device_reader(DeviceReader reader) { read_device_ = std::move(reader); }

 private:
  struct Job {
    uint64_t op = 0;
    uint32_t pid = 0;
    uint64_t dst = 0;               // the target base
    const uint8_t* src = nullptr;   // the source base
    uint64_t length = 0;            // bytes per segment
    int src_device = -1;            // >= 0: a GPU source on that device
    // At least one ({0, 0} for a plain copy). Its capacity stays with the job's slot.
    std::vector<gpu::CopySegment> segments;
    size_t seg = 0;                 // the segment being copied (segments.size(): done)
    uint64_t copied = 0;            // bytes of it already copied
  };
  // Copies up to `bytes` more of `job`, adding what it moved to `*moved`; an error ends the job.
  Status copy_some(Job& job, uint64_t bytes, uint64_t* moved);
  Status copy_local(Job& job, uint64_t bytes, uint64_t* moved);
  Status copy_remote(Job& job, uint64_t bytes, uint64_t* moved);
  Status copy_from_device(Job& job, uint64_t bytes, uint64_t* moved);
  // Moves the job's position on by `n` bytes (across segments).
  static void advance(Job& job, uint64_t n);
  // process_vm_writev of [src, src + length) to `dst` in process `pid`, all of it or an error.
  static Status write_into(uint32_t pid, uint64_t dst, const uint8_t* src, uint64_t length);

  // The jobs: a ring of slots (a power of two; taking turns rotates it), so that neither a turn
  // nor a steady flow of jobs allocates (a slot keeps its segments' capacity).
  Job& slot(size_t i) { return ring_[(head_ + i) & (ring_.size() - 1)]; }
  void grow();
  void pop_front();
  void rotate();  // the front job to the back

  Options options_;
  uint32_t self_pid_;
  std::vector<Job> ring_;
  size_t head_ = 0;
  size_t count_ = 0;
  DeviceReader read_device_;
  std::vector<uint8_t> bounce_;  // GPU sources into other processes; allocated on first use
  std::vector<iovec> local_iov_, remote_iov_;  // kMaxIov each, allocated at the first gather
};

}  // namespace fabric_lib::transport::ipc

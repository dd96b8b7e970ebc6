// How the nvlink domain moves a WRITE's bytes into another process's memory, behind one
// interface so that the domain's bookkeeping (ops, imms, peers, events) is the same for every
// kind of memory and runs, and is tested, without a GPU:
//   - HostCopyEngine (host_copy_engine.h): host memory to a peer's host memory, with
//     process_vm_writev (cross-memory attach) — a real one-sided copy into the other process,
//     which lets the whole domain run between processes on machines without GPUs;
//   - the CUDA engine (cuda_copy_engine.h, CUDA builds): cudaMemcpyAsync or a page-copy kernel
//     into memory mapped with CUDA IPC, on a pool of streams.
// A copy is "done" only when its bytes are in the target's memory: the domain pushes the WRITE's
// imm after that, which is how data-before-imm holds.
#pragma once

#include <cstdint>
#include <vector>

#include "fabric_lib/memory.h"
#include "fabric_lib/status.h"
#include "transport/domain.h"

namespace fabric_lib::transport::nvlink {

struct CopyRequest {
  uint64_t op = 0;                 // the domain's id, reported back in CopyDone
  const void* src = nullptr;
  MemoryKind src_kind = MemoryKind::kHost;
  int src_device = -1;             // kCuda sources: the CUDA device
  uint64_t length = 0;
  // Host targets: the target process and its virtual address.
  uint32_t dst_pid = 0;
  uint64_t dst_addr = 0;
  // GPU targets: the target bytes as mapped into this process (CUDA IPC), and the device whose
  // context mapped them (the copy runs there).
  void* dst_ptr = nullptr;
  int dst_device = -1;
};

struct CopyDone {
  uint64_t op = 0;
  Status status;  // ok: every byte is in the target's memory
};

class CopyEngine {
 public:
  virtual ~CopyEngine() = default;
  // Accepts a copy (kAgain when full: try again after progress(); kFailed with *error).
  virtual PostResult submit(const CopyRequest& request, Status* error) = 0;
  // Starts what was submitted, moves copies along and appends the finished ones. Copies may
  // finish in any order.
  virtual void progress(std::vector<CopyDone>& done) = 0;
  // Copies accepted and not yet reported.
  virtual size_t inflight() const = 0;
  // Before the domain closes: waits for copies already running (bounded by their size) and
  // reports nothing more.
  virtual void drain() = 0;
};

}  // namespace fabric_lib::transport::nvlink

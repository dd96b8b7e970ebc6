// MappedWord: one 64-bit word of mapped pinned host memory that the CPU and GPU kernels both
// reach — the GPU-visible flag of Completion::flag and fabric_lib/device/flags.cuh, and the word
// a UvmWatcher polls (the role GDRCopy plays in the paper).
//
// Needs a CUDA build (FABRIC_LIB_CUDA) and a CUDA device; otherwise alloc_mapped_word() returns
// Unsupported. The memory is cudaHostAlloc(cudaHostAllocMapped | cudaHostAllocPortable): the GPU
// reaches it over PCIe, the CPU reads it from its own caches, and every GPU of the process may
// use it.
#pragma once

#include <cstdint>
#include <memory>

#include "fabric_lib/status.h"

namespace fabric_lib {

// Initially 0. The CPU uses host_ptr(); kernels use device_ptr() (the same address where the
// platform has unified addressing, but do not rely on it). Move-only; the word is freed when the
// object is destroyed or reset(). It stays valid after an engine that watched it has stopped.
class MappedWord {
 public:
  MappedWord();
  ~MappedWord();
  MappedWord(MappedWord&& other) noexcept;
  MappedWord& operator=(MappedWord&& other) noexcept;
  MappedWord(const MappedWord&) = delete;
  MappedWord& operator=(const MappedWord&) = delete;

  bool valid() const { return state_ != nullptr; }
  uint64_t* host_ptr() const;    // null when !valid()
  uint64_t* device_ptr() const;  // null when !valid()
  // Atomic accesses from the CPU: load with acquire, store with release ordering.
  uint64_t load() const;
  void store(uint64_t value);
  // Frees the word now (a kernel must no longer use it).
  void reset();

  struct State;  // defined by the library

 private:
  friend Result<MappedWord> alloc_mapped_word();
  explicit MappedWord(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// Allocates one mapped word. Unsupported without CUDA (build or device).
Result<MappedWord> alloc_mapped_word();

}  // namespace fabric_lib

// GPU <-> CPU signalling through 64-bit words in mapped pinned host memory (the paper's "UVM
// watcher"): a kernel writes a word and a CPU callback runs (GPU progress drives transfers, even
// from inside a CUDA graph); the CPU writes a word and a kernel sees it (GPU-visible completion
// flags, see Completion::flag and fabric_lib/device/flags.cuh).
//
// Both need a CUDA build (FABRIC_LIB_CUDA) and a CUDA device; otherwise the allocating calls
// return Unsupported. The memory is cudaHostAlloc(cudaHostAllocMapped | cudaHostAllocPortable):
// the GPU reaches it over PCIe, the CPU reads it from its own caches, and every GPU of the
// process may use it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "fabric_lib/status.h"

namespace fabric_lib {

namespace detail {
struct MappedWordState;
struct UvmWatcherState;
class EngineCore;
}  // namespace detail

// One 64-bit word of mapped pinned host memory, initially 0. The CPU uses host_ptr(); kernels use
// device_ptr() (the same address where the platform has unified addressing, but do not rely on
// it). Move-only; the word is freed when the object is destroyed or reset(). It stays valid after
// the engine that allocated a watcher around it has stopped.
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

 private:
  friend Result<MappedWord> alloc_mapped_word();
  explicit MappedWord(std::unique_ptr<detail::MappedWordState> state);
  std::unique_ptr<detail::MappedWordState> state_;
};

// Allocates one mapped word. Unsupported without CUDA (build or device).
Result<MappedWord> alloc_mapped_word();

// Called when a watched word changed: `old_value` is the value the watcher saw last (0 at first),
// `new_value` the one it sees now. Return true to keep watching, false to stop (the word stays
// allocated until its UvmWatcher goes).
//
// It runs on the engine's watcher thread, directly, for latency: it must be quick. It may call the
// engine (submits included: that is what it is for) and may free watchers, itself included, but
// must not call stop() or destroy the engine. Values written faster than the watcher polls are
// coalesced: the callback sees the latest, not every intermediate one.
using WatchCallback = std::function<bool(uint64_t old_value, uint64_t new_value)>;

// A mapped word watched by an engine's watcher thread (TransferEngine::alloc_uvm_watcher). A
// kernel writes device_ptr() (fabric_lib/device/flags.cuh: store_release), the watcher calls the
// callback. Move-only. Destroying it (or reset()) stops watching and frees the word; from any
// other thread than the watcher thread, it returns only once the callback is not running and will
// never run again. Safe while other watchers of the same engine run.
class UvmWatcher {
 public:
  UvmWatcher();
  ~UvmWatcher();
  UvmWatcher(UvmWatcher&& other) noexcept;
  UvmWatcher& operator=(UvmWatcher&& other) noexcept;
  UvmWatcher(const UvmWatcher&) = delete;
  UvmWatcher& operator=(const UvmWatcher&) = delete;

  bool valid() const { return state_ != nullptr; }
  uint64_t* host_ptr() const;
  uint64_t* device_ptr() const;
  // The word's current value (acquire load).
  uint64_t value() const;
  void reset();

 private:
  friend class detail::EngineCore;
  explicit UvmWatcher(std::unique_ptr<detail::UvmWatcherState> state);
  std::unique_ptr<detail::UvmWatcherState> state_;
};

}  // namespace fabric_lib

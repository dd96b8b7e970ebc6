// UvmWatcher: GPU progress drives CPU work (the paper's "UVM watcher"). A kernel writes a 64-bit
// word of mapped pinned host memory (fabric_lib/device/flags.cuh: store_release), the engine's
// watcher thread sees the change and runs a callback — which typically submits transfers, even
// from inside a CUDA graph. Made by TransferEngine::alloc_uvm_watcher (CUDA builds; Unsupported
// otherwise).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "fabric_lib/mapped_word.h"
#include "fabric_lib/status.h"

namespace fabric_lib {

class TransferEngine;

// Called when a watched word changed: `old_value` is the value the watcher saw last (0 at first),
// `new_value` the one it sees now. Return true to keep watching, false to stop (the word stays
// allocated until its UvmWatcher goes).
//
// It runs on the engine's watcher thread, directly, for latency: it must be quick. It may call the
// engine (submits included: that is what it is for) and may free watchers, itself included, but
// must not call stop() or destroy the engine. Values written faster than the watcher polls are
// coalesced: the callback sees the latest, not every intermediate one.
using WatchCallback = std::function<bool(uint64_t old_value, uint64_t new_value)>;

// A mapped word watched by an engine's watcher thread. Move-only. Destroying it (or reset())
// stops watching and frees the word; from any other thread than the watcher thread, it returns
// only once the callback is not running and will never run again. Safe while other watchers of
// the same engine run.
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

  struct State;  // defined by the engine

 private:
  friend class TransferEngine;
  explicit UvmWatcher(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace fabric_lib

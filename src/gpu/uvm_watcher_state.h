// What MappedWord and UvmWatcher own (the public classes of fabric_lib/uvm_watcher.h).
#pragma once

#include <cstdint>
#include <memory>

#include "gpu/mapped_memory.h"
#include "gpu/watcher_hub.h"

namespace fabric_lib::detail {

struct MappedWordState {
  gpu::MappedSlot slot;
  ~MappedWordState() { gpu::free_mapped_slot(slot); }
};

struct UvmWatcherState {
  MappedWord word;
  std::shared_ptr<gpu::WatcherHub> hub;  // keeps the hub object (not its thread) alive
  uint64_t id = 0;
  // Unwatch first (the hub must stop reading the word), then free the word.
  ~UvmWatcherState() {
    if (hub) hub->unwatch(id);
  }
};

}  // namespace fabric_lib::detail

// What a UvmWatcher (fabric_lib/uvm_watcher.h) owns: its mapped word and its place in the engine's
// watcher thread.
#pragma once

#include <cstdint>
#include <memory>

#include "core/uvm_watcher_hub.h"
#include "fabric_lib/mapped_word.h"
#include "fabric_lib/uvm_watcher.h"

namespace fabric_lib {

struct UvmWatcher::State {
  MappedWord word;
  std::shared_ptr<detail::UvmWatcherHub> hub;  // keeps the hub object (not its thread) alive
  uint64_t id = 0;
  // Unwatch first (the hub must stop reading the word), then free the word.
  ~State() {
    if (hub) hub->unwatch(id);
  }
};

}  // namespace fabric_lib

// UvmWatcher (fabric_lib/uvm_watcher.h): a MappedWord watched by the engine's watcher thread.
#include "fabric_lib/uvm_watcher.h"

#include "core/uvm_watcher_state.h"

namespace fabric_lib {

UvmWatcher::UvmWatcher() = default;
UvmWatcher::~UvmWatcher() = default;
UvmWatcher::UvmWatcher(UvmWatcher&& other) noexcept = default;
UvmWatcher& UvmWatcher::operator=(UvmWatcher&& other) noexcept = default;
UvmWatcher::UvmWatcher(std::unique_ptr<State> state) : state_(std::move(state)) {}

uint64_t* UvmWatcher::host_ptr() const { return state_ ? state_->word.host_ptr() : nullptr; }
uint64_t* UvmWatcher::device_ptr() const { return state_ ? state_->word.device_ptr() : nullptr; }
uint64_t UvmWatcher::value() const { return state_ ? state_->word.load() : 0; }
void UvmWatcher::reset() { state_.reset(); }

}  // namespace fabric_lib

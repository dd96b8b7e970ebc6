// MappedWord and UvmWatcher (fabric_lib/uvm_watcher.h). Allocation needs CUDA (mapped_memory.h
// says Unsupported otherwise); the rest is plain C++.
#include "fabric_lib/uvm_watcher.h"

#include "gpu/uvm_watcher_state.h"

namespace fabric_lib {

MappedWord::MappedWord() = default;
MappedWord::~MappedWord() = default;
MappedWord::MappedWord(MappedWord&& other) noexcept = default;
MappedWord& MappedWord::operator=(MappedWord&& other) noexcept = default;
MappedWord::MappedWord(std::unique_ptr<detail::MappedWordState> state) : state_(std::move(state)) {}

uint64_t* MappedWord::host_ptr() const { return state_ ? state_->slot.host : nullptr; }
uint64_t* MappedWord::device_ptr() const { return state_ ? state_->slot.device : nullptr; }
uint64_t MappedWord::load() const { return state_ ? __atomic_load_n(state_->slot.host, __ATOMIC_ACQUIRE) : 0; }
void MappedWord::store(uint64_t value) {
  if (state_) __atomic_store_n(state_->slot.host, value, __ATOMIC_RELEASE);
}
void MappedWord::reset() { state_.reset(); }

Result<MappedWord> alloc_mapped_word() {
  Result<gpu::MappedSlot> slot = gpu::alloc_mapped_slot();
  if (!slot.ok()) return slot.status();
  auto state = std::make_unique<detail::MappedWordState>();
  state->slot = *slot;
  return MappedWord(std::move(state));
}

UvmWatcher::UvmWatcher() = default;
UvmWatcher::~UvmWatcher() = default;
UvmWatcher::UvmWatcher(UvmWatcher&& other) noexcept = default;
UvmWatcher& UvmWatcher::operator=(UvmWatcher&& other) noexcept = default;
UvmWatcher::UvmWatcher(std::unique_ptr<detail::UvmWatcherState> state) : state_(std::move(state)) {}

uint64_t* UvmWatcher::host_ptr() const { return state_ ? state_->word.host_ptr() : nullptr; }
uint64_t* UvmWatcher::device_ptr() const { return state_ ? state_->word.device_ptr() : nullptr; }
uint64_t UvmWatcher::value() const { return state_ ? state_->word.load() : 0; }
void UvmWatcher::reset() { state_.reset(); }

}  // namespace fabric_lib

// MappedWord (fabric_lib/mapped_word.h). Allocation needs CUDA (mapped_memory.h says Unsupported
// otherwise); the rest is plain C++.
#include "fabric_lib/mapped_word.h"

#include "gpu/mapped_memory.h"

namespace fabric_lib {

struct MappedWord::State {
  gpu::MappedSlot slot;
  ~State() { gpu::free_mapped_slot(slot); }
};

MappedWord::MappedWord() = default;
MappedWord::~MappedWord() = default;
MappedWord::MappedWord(MappedWord&& other) noexcept = default;
MappedWord& MappedWord::operator=(MappedWord&& other) noexcept = default;
MappedWord::MappedWord(std::unique_ptr<State> state) : state_(std::move(state)) {}

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
  auto state = std::make_unique<MappedWord::State>();
  state->slot = *slot;
  return MappedWord(std::move(state));
}

}  // namespace fabric_lib

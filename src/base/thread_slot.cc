#include "base/thread_slot.h"

#include <atomic>
#include <bit>
#include <cstdint>

namespace fabric_lib {
namespace {

constexpr size_t kWords = kMaxThreadSlots / 64;
std::atomic<uint64_t> taken[kWords];  // bit i of word w: slot 64 * w + i is held

constexpr int kUnclaimed = -2;
thread_local int slot = kUnclaimed;  // a plain thread-local: no guard on the fast path

int claim() {
  for (size_t w = 0; w < kWords; ++w) {
    uint64_t bits = taken[w].load(std::memory_order_relaxed);
    while (~bits != 0) {
      const int bit = std::countr_one(bits);
      if (taken[w].compare_exchange_weak(bits, bits | (uint64_t{1} << bit), std::memory_order_acquire)) {
        return static_cast<int>(64 * w) + bit;
      }
    }
  }
  return -1;
}

// Gives the slot back when its thread exits (and leaves the thread on the shared path should it
// use the engine from a later thread-exit handler).
struct Holder {
  ~Holder() {
    if (slot >= 0) taken[slot / 64].fetch_and(~(uint64_t{1} << (slot % 64)), std::memory_order_release);
    slot = -1;
  }
};

}  // namespace

int thread_slot() {
  if (slot != kUnclaimed) [[likely]] return slot;
  slot = claim();
  if (slot >= 0) {
    thread_local Holder holder;  // constructed once, on this first claim
    (void)holder;
  }
  return slot;
}

}  // namespace fabric_lib

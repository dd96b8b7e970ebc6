// The engine's requests live in a slab and are recycled, never freed while the engine lives: a
// submit takes one whose vectors kept their capacity from earlier use (planning then allocates
// nothing in steady state) and its group's progress owner gives it back when the request
// completed. Submitters and owners may be different threads, so the free list is shared: a stack
// under a spin lock, held for a push or a pop only. (A lock-free MPMC queue was used before; its
// per-producer blocks still allocated now and then in steady state, and tests/alloc proves that
// nothing does now.)
//
// Each request has a fixed slot (its index in the slab) and a generation, bumped each time it is
// taken; a TransferId is generation, slot and group (make_id). So a group's worker finds a
// request by its id without a map: the slot gives the request, and the id it is live under
// (Request::live_id) says whether it is still that transfer. The slab grows in chunks of doubling
// size (no chunk ever moves, so `at` needs no lock) up to kMaxSlots requests; the memory of the
// most requests ever taken at once stays until the engine goes (beyond kMaxFree idle ones, their
// vectors' capacity is given back).
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <vector>

#include "base/cpu_relax.h"
#include "core/request.h"
#include "fabric_lib/requests.h"
#include "fabric_lib/status.h"

namespace fabric_lib::detail {

class RequestPool {
 public:
  // TransferId layout, low to high: group (kGroupBits), slot (kSlotBits), generation (32 bits;
  // never 0, so no id is 0). A slot's generation wraps after 2^32 - 1 uses: an id that old may
  // then name a later transfer (cancel() would cancel that one).
  static constexpr int kGroupBits = 6;  // groups <= 64
  static constexpr int kSlotBits = 26;
  static constexpr uint32_t kMaxSlots = uint32_t{1} << kSlotBits;
  // Idle requests beyond this many drop their vectors' capacity when they come back.
  static constexpr size_t kMaxFree = 1 << 14;

  struct IdParts {
    uint32_t generation;
    uint32_t slot;
    size_t group;
  };
  static TransferId make_id(uint32_t generation, uint32_t slot, size_t group) {
    return (TransferId{generation} << 32) | (TransferId{slot} << kGroupBits) | group;
  }
  static IdParts split(TransferId id) {
    return {static_cast<uint32_t>(id >> 32), static_cast<uint32_t>((id >> kGroupBits) & (kMaxSlots - 1)),
            static_cast<size_t>(id & ((TransferId{1} << kGroupBits) - 1))};
  }

  RequestPool() = default;
  ~RequestPool();
  RequestPool(const RequestPool&) = delete;
  RequestPool& operator=(const RequestPool&) = delete;

  // A request in its initial state under a new generation; null when kMaxSlots requests are
  // taken at once.
  Request* acquire();
  // Takes `r` back (any thread); it is reset here, so its completion and references go now.
  void release(Request* r);
  // The request in `slot`; null when the slab never grew that far (any thread).
  Request* at(uint32_t slot) const;
  // Whether `id` was ever handed out (its slot exists and has reached its generation).
  bool issued(TransferId id) const;

  // Gives a request back to its pool when it goes out of scope unsubmitted.
  struct Returner {
    RequestPool* pool = nullptr;
    void operator()(Request* r) const { pool->release(r); }
  };
  using Ptr = std::unique_ptr<Request, Returner>;
  // acquire() for a submit: null when the slab is full (too_many_requests() says so).
  Ptr take() { return Ptr(acquire(), Returner{this}); }
  static Status too_many_requests();

 private:
  // Chunk k holds kFirstChunk << k requests, from slot kFirstChunk * (2^k - 1).
  static constexpr uint32_t kFirstChunk = 64;
  static constexpr size_t kChunks = 21;  // kFirstChunk * (2^21 - 1) >= kMaxSlots
  static size_t chunk_of(uint32_t slot);
  static uint32_t chunk_start(size_t k) { return kFirstChunk * ((uint32_t{1} << k) - 1); }

  void lock() {
    while (locked_.exchange(true, std::memory_order_acquire)) {
      while (locked_.load(std::memory_order_relaxed)) cpu_relax();
    }
  }
  void unlock() { locked_.store(false, std::memory_order_release); }

  alignas(64) std::atomic<bool> locked_{false};
  std::vector<Request*> free_;  // under the lock
  std::atomic<size_t> idle_{0};  // free_.size(), readable without the lock
  uint32_t slots_ = 0;          // slots handed out so far (under the lock)
  std::array<std::atomic<Request*>, kChunks> chunks_{};
};

}  // namespace fabric_lib::detail

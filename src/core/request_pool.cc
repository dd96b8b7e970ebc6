#include "core/request_pool.h"

#include <bit>
#include <string>

namespace fabric_lib::detail {

RequestPool::~RequestPool() {
  for (std::atomic<Request*>& c : chunks_) delete[] c.load(std::memory_order_relaxed);
}

size_t RequestPool::chunk_of(uint32_t slot) {
  // Chunk k starts at kFirstChunk * (2^k - 1): slot / kFirstChunk + 1 lies in [2^k, 2^(k+1)).
  return static_cast<size_t>(std::bit_width(slot / kFirstChunk + 1) - 1);
}

Request* RequestPool::at(uint32_t slot) const {
  if (slot >= kMaxSlots) return nullptr;
  const size_t k = chunk_of(slot);
  Request* chunk = chunks_[k].load(std::memory_order_acquire);
  return chunk ? &chunk[slot - chunk_start(k)] : nullptr;
}

Request* RequestPool::acquire() {
  Request* r = nullptr;
  lock();
  if (!free_.empty()) {
    r = free_.back();
    free_.pop_back();
    idle_.store(free_.size(), std::memory_order_relaxed);
  } else if (slots_ < kMaxSlots) {
    const uint32_t slot = slots_++;
    const size_t k = chunk_of(slot);
    Request* chunk = chunks_[k].load(std::memory_order_relaxed);
    if (!chunk) {  // the first slot of a new chunk: once per doubling, so rarely under the lock
      const uint32_t size = kFirstChunk << k;
      chunk = new Request[size];
      for (uint32_t i = 0; i < size; ++i) chunk[i].slot = chunk_start(k) + i;
      chunks_[k].store(chunk, std::memory_order_release);
    }
    r = &chunk[slot - chunk_start(k)];
  }
  unlock();
  if (r) {
    uint32_t g = r->generation.load(std::memory_order_relaxed) + 1;
    r->generation.store(g == 0 ? 1 : g, std::memory_order_relaxed);
  }
  return r;
}

void RequestPool::release(Request* r) {
  if (!r) return;
  r->reset();
  // The idle count read without the lock is a hint; a request trimmed one too early or late costs nothing.
  if (idle_.load(std::memory_order_relaxed) >= kMaxFree) r->drop_capacity();
  lock();
  free_.push_back(r);  // grows only while the slab does: no allocation in steady state
  idle_.store(free_.size(), std::memory_order_relaxed);
  unlock();
}

bool RequestPool::issued(TransferId id) const {
  const IdParts p = split(id);
  if (p.generation == 0) return false;
  const Request* r = at(p.slot);
  return r && p.generation <= r->generation.load(std::memory_order_relaxed);
}

Status RequestPool::too_many_requests() {
  return Status(ErrorCode::kResourceExhausted,
                "more than " + std::to_string(kMaxSlots) + " requests in flight at once");
}

}  // namespace fabric_lib::detail

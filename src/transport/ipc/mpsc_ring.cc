#include "transport/ipc/mpsc_ring.h"

#include <algorithm>
#include <cstring>

namespace fabric_lib::transport::ipc {
namespace {

// A producer gives up after this many attempts in one push (only a corrupted ring, or a storm of
// competing producers, takes that long): the caller sees kFull and retries later.
constexpr int kMaxAttempts = 4096;

}  // namespace

bool valid_imm_record(const Record& r) {
  return r.header.type == RecordType::kImm && r.header.count != 0 && r.header.count <= kMaxImmRecordCount &&
         r.payload_len == 0;
}

void init_ring(RingView ring) {
  for (uint64_t i = 0; i < ring.capacity; ++i) {
    Slot& s = ring.slots[i];
    std::memset(reinterpret_cast<uint8_t*>(&s) + sizeof(s.state), 0, sizeof(Slot) - sizeof(s.state));
    s.state.store(slot_word(i, SlotState::kFree, 0), std::memory_order_relaxed);
  }
  ring.header->enqueue_pos.store(0, std::memory_order_relaxed);
  ring.header->dequeue_pos.store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
}

RingProducer::Push RingProducer::push(const RecordHeader& h, std::span<const uint8_t> payload) {
  if (closed()) return Push::kClosed;
  const uint64_t mask = ring_.capacity - 1;
  uint64_t pos = ring_.header->enqueue_pos.load(std::memory_order_relaxed);
  for (int attempt = 0; attempt < kMaxAttempts; ++attempt) {
    Slot& s = ring_.slots[pos & mask];
    uint64_t word = s.state.load(std::memory_order_acquire);
    const uint64_t free_word = slot_word(pos, SlotState::kFree, 0);
    if (word == free_word) {
      if (!s.state.compare_exchange_weak(word, slot_word(pos, SlotState::kClaimed, pid_), std::memory_order_acquire,
                                         std::memory_order_relaxed)) {
        continue;  // another producer won this slot (or a spurious failure): look again
      }
      uint64_t expected = pos;  // advance the shared position (someone may have helped already)
      ring_.header->enqueue_pos.compare_exchange_strong(expected, pos + 1, std::memory_order_relaxed);
      s.type = static_cast<uint8_t>(h.type);
      s.flags = h.flags;
      const size_t n = std::min(payload.size(), kSlotPayloadBytes);
      s.payload_len = static_cast<uint16_t>(n);
      s.value = h.value;
      s.sender = h.sender;
      s.sender_pid = h.sender_pid;
      s.count = h.count;
      s.offset = h.offset;
      s.reserved = 0;
      if (n) std::memcpy(s.payload, payload.data(), n);
      s.state.store(slot_word(pos, SlotState::kReady, pid_), std::memory_order_release);
      return Push::kPushed;
    }
    const uint64_t at = word_position(word);
    if (at == (pos & kPositionMask) && word_state(word) != SlotState::kFree) {
      // Taken for `pos` by a producer that has not advanced the shared position yet: help it.
      uint64_t expected = pos;
      ring_.header->enqueue_pos.compare_exchange_strong(expected, pos + 1, std::memory_order_relaxed);
      pos = ring_.header->enqueue_pos.load(std::memory_order_relaxed);
      continue;
    }
    if (at == ((pos - ring_.capacity) & kPositionMask)) return Push::kFull;  // last lap not consumed yet
    pos = ring_.header->enqueue_pos.load(std::memory_order_relaxed);  // our position was stale
  }
  return Push::kFull;
}

uint64_t RingProducer::free_slots_hint() const {
  const uint64_t head = ring_.header->dequeue_pos.load(std::memory_order_relaxed);
  const uint64_t tail = ring_.header->enqueue_pos.load(std::memory_order_relaxed);
  const uint64_t used = tail >= head ? tail - head : 0;
  return used >= ring_.capacity ? 0 : ring_.capacity - used;
}

bool RingProducer::closed() const { return ring_.header->closed.load(std::memory_order_acquire) != 0; }

void RingConsumer::release_head() {
  Slot& s = ring_.slots[position_ & (ring_.capacity - 1)];
  s.state.store(slot_word(position_ + ring_.capacity, SlotState::kFree, 0), std::memory_order_release);
  ++position_;
  ring_.header->dequeue_pos.store(position_, std::memory_order_relaxed);
}

RingConsumer::Pop RingConsumer::pop(Record& out, uint32_t* claimer) {
  Slot& s = ring_.slots[position_ & (ring_.capacity - 1)];
  const uint64_t word = s.state.load(std::memory_order_acquire);
  if (word_position(word) != (position_ & kPositionMask)) return Pop::kEmpty;
  const SlotState state = word_state(word);
  if (state == SlotState::kFree) return Pop::kEmpty;
  if (state == SlotState::kClaimed) {
    if (claimer) *claimer = word_pid(word);
    return Pop::kBlocked;
  }
  if (state != SlotState::kReady) {  // an impossible state value: garbage
    release_head();
    return Pop::kInvalid;
  }
  const uint8_t type = s.type;
  const uint16_t len = s.payload_len;
  const bool known = type == static_cast<uint8_t>(RecordType::kImm) || type == static_cast<uint8_t>(RecordType::kFragment);
  if (!known || len > kSlotPayloadBytes) {
    release_head();
    return Pop::kInvalid;
  }
  out.header.type = static_cast<RecordType>(type);
  out.header.flags = s.flags;
  out.header.value = s.value;
  out.header.sender = s.sender;
  out.header.sender_pid = s.sender_pid;
  out.header.count = s.count;
  out.header.offset = s.offset;
  out.payload_len = len;
  if (len) std::memcpy(out.payload, s.payload, len);
  release_head();
  return Pop::kRecord;
}

bool RingConsumer::skip_claimed(uint32_t claimer) {
  Slot& s = ring_.slots[position_ & (ring_.capacity - 1)];
  uint64_t expected = slot_word(position_, SlotState::kClaimed, claimer);
  // Free it for the next lap only if it is still that claim (a CAS, in case it got published).
  if (!s.state.compare_exchange_strong(expected, slot_word(position_ + ring_.capacity, SlotState::kFree, 0),
                                       std::memory_order_acq_rel)) {
    return false;
  }
  ++position_;
  ring_.header->dequeue_pos.store(position_, std::memory_order_relaxed);
  return true;
}

bool RingConsumer::has_pending() const {
  const Slot& s = ring_.slots[position_ & (ring_.capacity - 1)];
  const uint64_t word = s.state.load(std::memory_order_acquire);
  return word_position(word) == (position_ & kPositionMask) && word_state(word) != SlotState::kFree;
}

}  // namespace fabric_lib::transport::ipc

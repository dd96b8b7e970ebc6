// The bounded multi-producer, single-consumer ring of an ipc segment (ring_layout.h). Any
// number of processes push records; the owning domain pops them. Lock-free: a producer claims a
// slot with one compare-and-swap on the slot's state word, fills it and publishes it; the
// consumer reads published slots in position order and frees them for the next lap.
//
// A full ring is back-pressure (kFull: try again later), never loss. The consumer validates
// every record: the slots are written by other processes.
#pragma once

#include <cstdint>
#include <span>

#include "transport/ipc/ring_layout.h"

namespace fabric_lib::transport::ipc {

// What a producer puts into one slot.
struct RecordHeader {
  RecordType type = RecordType::kImm;
  uint8_t flags = 0;
  uint32_t value = 0;
  uint64_t sender = 0;
  uint32_t sender_pid = 0;
  uint32_t count = 0;
  uint32_t offset = 0;
};

// A record as the consumer copied it out of its slot (checked: known type, payload fits).
struct Record {
  RecordHeader header;
  uint16_t payload_len = 0;
  uint8_t payload[kSlotPayloadBytes];
};

// A single imm record may announce at most this many arrivals (senders coalesce equal imms and
// a run's imms up to it; a larger run takes several records).
inline constexpr uint32_t kMaxImmRecordCount = 1u << 16;
// Whether a popped kImm record is well formed: 1..kMaxImmRecordCount arrivals and no payload
// (the owner skips any other; fragments are checked by MessageAssembler::add).
bool valid_imm_record(const Record& record);

// The shared state both sides work on: the header's positions and the slot array. `slots` must
// be a power of two; the memory must stay mapped while the view is used.
struct RingView {
  SegmentHeader* header = nullptr;
  Slot* slots = nullptr;
  uint64_t capacity = 0;

  bool valid() const { return header && slots && capacity && (capacity & (capacity - 1)) == 0; }
};

// Formats a fresh ring: every slot free for its first lap, positions at 0.
void init_ring(RingView ring);

class RingProducer {
 public:
  enum class Push : uint8_t { kPushed, kFull, kClosed };

  RingProducer() = default;
  RingProducer(RingView ring, uint32_t pid) : ring_(ring), pid_(pid) {}

  // Pushes one record with up to kSlotPayloadBytes of payload (longer payloads are cut: callers
  // fragment). kClosed when the owner has closed its domain.
  Push push(const RecordHeader& header, std::span<const uint8_t> payload = {});
  // Slots free right now (a hint: other producers may take them first).
  uint64_t free_slots_hint() const;
  bool closed() const;

 private:
  RingView ring_;
  uint32_t pid_ = 0;
};

class RingConsumer {
 public:
  enum class Pop : uint8_t {
    kRecord,   // `out` holds the next record
    kEmpty,    // nothing published at the head
    kBlocked,  // the head slot is claimed by `*claimer` and not yet published
    kInvalid,  // the head slot held garbage (bad type or length); it was freed and skipped
  };

  RingConsumer() = default;
  explicit RingConsumer(RingView ring) : ring_(ring) {}

  Pop pop(Record& out, uint32_t* claimer = nullptr);
  // Frees the head slot while it is still claimed by `claimer` (whose process is gone); false
  // when the slot changed meanwhile (it was published after all: pop it instead).
  bool skip_claimed(uint32_t claimer);
  // Whether anything is claimed or published at the head (the owner must not sleep then).
  bool has_pending() const;
  uint64_t position() const { return position_; }

 private:
  void release_head();

  RingView ring_;
  uint64_t position_ = 0;
};

}  // namespace fabric_lib::transport::ipc

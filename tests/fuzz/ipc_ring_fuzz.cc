// libFuzzer target: what the owner of an IPC segment reads from its ring, which any peer process
// writes (transport/ipc/mpsc_ring.h, message_assembler.h). The input becomes the ring's slots —
// state words, record headers and payloads as a peer could leave them — and the owner's side runs
// as IpcDomain::consume_ring does: RingConsumer::pop() each slot, valid_imm_record() for imms,
// MessageAssembler::add() for message fragments, then deliver() into posted receive buffers.
// A producer then pushes into the same (possibly garbage) ring. Nothing may crash, loop without
// bound, or write outside a buffer (ASan), and every delivered message fits its buffer.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "transport/ipc/message_assembler.h"
#include "transport/ipc/mpsc_ring.h"

namespace {

using namespace fabric_lib::transport;
using namespace fabric_lib::transport::ipc;

constexpr uint64_t kSlots = 64;
constexpr size_t kRecvBytes = 512;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto header = std::make_unique<SegmentHeader>();
  std::vector<Slot> slots(kSlots);
  RingView ring{header.get(), slots.data(), kSlots};
  init_ring(ring);
  // The first 8 bytes (if any) move the producers' position; the rest overwrite the slots in order.
  size_t at = 0;
  if (size >= 8) {
    uint64_t enqueue = 0;
    std::memcpy(&enqueue, data, 8);
    header->enqueue_pos.store(enqueue % (4 * kSlots));
    at = 8;
  }
  const size_t n = std::min(size - at, sizeof(Slot) * kSlots);
  // Slots hold atomics: copy the bytes in word by word as another process would write them.
  for (size_t s = 0; s * sizeof(Slot) < n; ++s) {
    uint8_t raw[sizeof(Slot)] = {};
    std::memcpy(raw, data + at + s * sizeof(Slot), std::min(sizeof(Slot), n - s * sizeof(Slot)));
    uint64_t word = 0;
    std::memcpy(&word, raw, 8);
    slots[s].state.store(word);
    std::memcpy(reinterpret_cast<uint8_t*>(&slots[s]) + 8, raw + 8, sizeof(Slot) - 8);
  }

  MessageAssembler assembler(/*max_waiting_bytes=*/64 * 1024);
  std::vector<std::vector<uint8_t>> buffers;
  for (uint64_t i = 0; i < 8; ++i) {
    buffers.emplace_back(kRecvBytes);
    RecvWr wr;
    wr.buf = buffers.back().data();
    wr.length = kRecvBytes;
    wr.context = i;
    assembler.post_recv(/*control=*/i % 2 == 1, wr);
  }
  RingConsumer consumer(ring);
  uint64_t imms = 0;
  for (uint64_t step = 0; step < 4 * kSlots; ++step) {
    Record record;
    uint32_t claimer = 0;
    const RingConsumer::Pop pop = consumer.pop(record, &claimer);
    if (pop == RingConsumer::Pop::kEmpty) break;
    if (pop == RingConsumer::Pop::kInvalid) continue;
    if (pop == RingConsumer::Pop::kBlocked) {
      if (!consumer.skip_claimed(claimer)) break;  // as for a claimer that exited
      continue;
    }
    if (record.payload_len > kSlotPayloadBytes) std::abort();
    if (record.header.type == RecordType::kImm) {
      if (valid_imm_record(record)) imms += record.header.count;
      continue;
    }
    if (record.header.type != RecordType::kFragment) std::abort();  // pop() lets only known types out
    (void)assembler.add(record);
    if (!assembler.accepting()) break;
  }
  if (imms > 4 * kSlots * uint64_t{kMaxImmRecordCount}) std::abort();
  std::vector<Event> events;
  assembler.deliver(events, 64);
  for (const Event& ev : events) {
    if (ev.context >= buffers.size() || ev.length > kRecvBytes) std::abort();
  }
  (void)assembler.drop_partial_of([](uint32_t pid) { return pid % 2 == 0; });

  // A producer on the same ring: one push, bounded whatever the slots hold (a ring of garbage
  // costs it its full number of attempts).
  RingProducer producer(ring, 4242);
  RecordHeader h;
  h.type = RecordType::kImm;
  h.count = 1;
  (void)producer.push(h);
  (void)producer.free_slots_hint();
  return 0;
}

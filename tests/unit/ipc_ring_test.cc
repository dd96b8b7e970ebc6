// The ipc MPSC ring on ordinary memory: order and completeness with many producer threads,
// back-pressure when full (never loss), wrap-around, slots claimed by a producer that died, and
// garbage written into slots by a misbehaving peer.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "transport/ipc/mpsc_ring.h"

namespace fabric_lib::transport::ipc {
namespace {

struct TestRing {
  explicit TestRing(uint64_t capacity) : slots(new Slot[capacity]) {
    view = RingView{&header, slots.get(), capacity};
    std::memset(static_cast<void*>(&header), 0, sizeof(header));
    init_ring(view);
  }
  SegmentHeader header;
  std::unique_ptr<Slot[]> slots;
  RingView view;
};

RecordHeader imm_record(uint32_t value, uint32_t count = 1) {
  RecordHeader h;
  h.type = RecordType::kImm;
  h.value = value;
  h.count = count;
  h.sender = 7;
  h.sender_pid = 1234;
  return h;
}

TEST(IpcRing, PushThenPopKeepsEveryFieldAndPayload) {
  TestRing ring(64);
  RingProducer producer(ring.view, 4321);
  RingConsumer consumer(ring.view);
  Record r;
  EXPECT_EQ(consumer.pop(r), RingConsumer::Pop::kEmpty);
  EXPECT_FALSE(consumer.has_pending());
  std::vector<uint8_t> payload(kSlotPayloadBytes);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 7 + 1);
  RecordHeader h;
  h.type = RecordType::kFragment;
  h.flags = kFlagControl;
  h.value = 99;
  h.sender = 0xabcdef;
  h.sender_pid = 4321;
  h.count = 5000;
  h.offset = 216;
  ASSERT_EQ(producer.push(h, payload), RingProducer::Push::kPushed);
  EXPECT_TRUE(consumer.has_pending());
  ASSERT_EQ(consumer.pop(r), RingConsumer::Pop::kRecord);
  EXPECT_EQ(r.header.type, RecordType::kFragment);
  EXPECT_EQ(r.header.flags, kFlagControl);
  EXPECT_EQ(r.header.value, 99u);
  EXPECT_EQ(r.header.sender, 0xabcdefu);
  EXPECT_EQ(r.header.sender_pid, 4321u);
  EXPECT_EQ(r.header.count, 5000u);
  EXPECT_EQ(r.header.offset, 216u);
  ASSERT_EQ(r.payload_len, kSlotPayloadBytes);
  EXPECT_EQ(std::memcmp(r.payload, payload.data(), payload.size()), 0);
  EXPECT_EQ(consumer.pop(r), RingConsumer::Pop::kEmpty);
}

TEST(IpcRing, FullRingRefusesUntilConsumedAndWrapsManyLaps) {
  TestRing ring(64);
  RingProducer producer(ring.view, 1);
  RingConsumer consumer(ring.view);
  uint32_t next_push = 0, next_pop = 0;
  for (int lap = 0; lap < 50; ++lap) {
    while (producer.push(imm_record(next_push)) == RingProducer::Push::kPushed) ++next_push;
    EXPECT_EQ(next_push - next_pop, 64u) << "a full ring holds exactly its capacity";
    EXPECT_EQ(producer.free_slots_hint(), 0u);
    // Consume part of it: exactly that many pushes succeed again.
    const uint32_t take = 1 + lap % 63;
    for (uint32_t k = 0; k < take; ++k) {
      Record r;
      ASSERT_EQ(consumer.pop(r), RingConsumer::Pop::kRecord);
      EXPECT_EQ(r.header.value, next_pop++);
    }
  }
  Record r;
  while (consumer.pop(r) == RingConsumer::Pop::kRecord) EXPECT_EQ(r.header.value, next_pop++);
  EXPECT_EQ(next_pop, next_push);
}

TEST(IpcRing, ManyProducersLoseNothingAndKeepEachProducersOrder) {
  constexpr int kProducers = 6;
  constexpr uint32_t kPerProducer = 40000;
  TestRing ring(256);  // small: producers hit back-pressure constantly
  std::atomic<int> started{0};
  std::vector<std::thread> threads;
  for (int p = 0; p < kProducers; ++p) {
    threads.emplace_back([&, p] {
      RingProducer producer(ring.view, 100 + p);
      started.fetch_add(1);
      for (uint32_t i = 0; i < kPerProducer;) {
        RecordHeader h = imm_record(i);
        h.sender = static_cast<uint64_t>(p);
        if (producer.push(h) == RingProducer::Push::kPushed) ++i;
        else std::this_thread::yield();
      }
    });
  }
  RingConsumer consumer(ring.view);
  std::vector<uint32_t> next(kProducers, 0);
  uint64_t total = 0;
  while (total < uint64_t{kProducers} * kPerProducer) {
    Record r;
    const auto res = consumer.pop(r);
    if (res == RingConsumer::Pop::kRecord) {
      ASSERT_LT(r.header.sender, static_cast<uint64_t>(kProducers));
      ASSERT_EQ(r.header.value, next[r.header.sender]) << "producer " << r.header.sender << " out of order";
      ++next[r.header.sender];
      ++total;
    } else {
      ASSERT_NE(res, RingConsumer::Pop::kInvalid);
      std::this_thread::yield();
    }
  }
  for (auto& t : threads) t.join();
  Record r;
  EXPECT_EQ(consumer.pop(r), RingConsumer::Pop::kEmpty);
}

TEST(IpcRing, SlotClaimedByADeadProducerIsSkippedOnlyWhileStillClaimed) {
  TestRing ring(64);
  RingProducer producer(ring.view, 2);
  RingConsumer consumer(ring.view);
  // A producer claims position 0 and dies before publishing (its pid is in the claim).
  ring.slots[0].state.store(slot_word(0, SlotState::kClaimed, 77777), std::memory_order_release);
  ring.header.enqueue_pos.store(1);
  ASSERT_EQ(producer.push(imm_record(5)), RingProducer::Push::kPushed);  // lands at position 1
  Record r;
  uint32_t claimer = 0;
  ASSERT_EQ(consumer.pop(r, &claimer), RingConsumer::Pop::kBlocked);
  EXPECT_EQ(claimer, 77777u);
  EXPECT_FALSE(consumer.skip_claimed(1)) << "only the recorded claim may be skipped";
  ASSERT_TRUE(consumer.skip_claimed(77777));
  ASSERT_EQ(consumer.pop(r), RingConsumer::Pop::kRecord);
  EXPECT_EQ(r.header.value, 5u);
  // The skipped slot is free for its next lap: a full lap of pushes fits again.
  int pushed = 0;
  while (producer.push(imm_record(6)) == RingProducer::Push::kPushed) ++pushed;
  EXPECT_EQ(pushed, 64);
}

TEST(IpcRing, GarbageSlotsAreSkippedAsInvalid) {
  TestRing ring(64);
  RingProducer producer(ring.view, 3);
  RingConsumer consumer(ring.view);
  ASSERT_EQ(producer.push(imm_record(1)), RingProducer::Push::kPushed);
  ASSERT_EQ(producer.push(imm_record(2)), RingProducer::Push::kPushed);
  ASSERT_EQ(producer.push(imm_record(3)), RingProducer::Push::kPushed);
  ring.slots[0].type = 42;                          // unknown record type
  ring.slots[1].payload_len = kSlotPayloadBytes + 1;  // longer than a slot
  Record r;
  EXPECT_EQ(consumer.pop(r), RingConsumer::Pop::kInvalid);
  EXPECT_EQ(consumer.pop(r), RingConsumer::Pop::kInvalid);
  ASSERT_EQ(consumer.pop(r), RingConsumer::Pop::kRecord);
  EXPECT_EQ(r.header.value, 3u);
  // An impossible state value is garbage too.
  ASSERT_EQ(producer.push(imm_record(4)), RingProducer::Push::kPushed);
  ring.slots[3].state.store(slot_word(3, static_cast<SlotState>(3), 0));
  EXPECT_EQ(consumer.pop(r), RingConsumer::Pop::kInvalid);
  EXPECT_EQ(consumer.pop(r), RingConsumer::Pop::kEmpty);
}

// An imm record announces 1..kMaxImmRecordCount arrivals and carries no payload; the owner skips
// any other (a peer wrote it).
TEST(IpcRing, ImmRecordsAreCheckedBeforeTheyCount) {
  Record r;
  r.header.type = RecordType::kImm;
  r.header.count = 1;
  EXPECT_TRUE(valid_imm_record(r));
  r.header.count = kMaxImmRecordCount;
  EXPECT_TRUE(valid_imm_record(r));
  r.header.count = 0;
  EXPECT_FALSE(valid_imm_record(r));
  r.header.count = kMaxImmRecordCount + 1;
  EXPECT_FALSE(valid_imm_record(r));
  r.header.count = 1;
  r.payload_len = 1;
  EXPECT_FALSE(valid_imm_record(r));
  r.payload_len = 0;
  r.header.type = RecordType::kFragment;
  EXPECT_FALSE(valid_imm_record(r));
}

TEST(IpcRing, ClosedRingRefusesPushes) {
  TestRing ring(64);
  RingProducer producer(ring.view, 4);
  ring.header.closed.store(1);
  EXPECT_EQ(producer.push(imm_record(1)), RingProducer::Push::kClosed);
}

}  // namespace
}  // namespace fabric_lib::transport::ipc

// Message reassembly at an ipc target: fragments interleaved from several senders, fragments
// that do not continue their message (dropped, with the message), partial messages of senders
// that died, back-pressure while complete messages wait for buffers, and the domain skipping a
// ring slot that a producer claimed and died before publishing.
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

#include "ipc_test_support.h"
#include "transport/ipc/message_assembler.h"

namespace fabric_lib::transport::ipc {
namespace {

Record fragment(uint64_t sender, uint32_t seq, uint32_t total, uint32_t offset, uint16_t len, uint8_t fill,
                bool control = false) {
  Record r;
  r.header.type = RecordType::kFragment;
  r.header.flags = control ? kFlagControl : 0;
  r.header.value = seq;
  r.header.sender = sender;
  r.header.sender_pid = static_cast<uint32_t>(sender);
  r.header.count = total;
  r.header.offset = offset;
  r.payload_len = len;
  std::memset(r.payload, fill, len);
  return r;
}

TEST(IpcAssembler, InterleavedSendersReassembleInArrivalOrderOfCompletion) {
  MessageAssembler m;
  std::vector<uint8_t> b1(1000), b2(1000);
  m.post_recv(false, {b1.data(), b1.size(), nullptr, 1});
  m.post_recv(false, {b2.data(), b2.size(), nullptr, 2});
  ASSERT_TRUE(m.add(fragment(10, 1, 300, 0, 216, 'a')).ok());
  ASSERT_TRUE(m.add(fragment(20, 1, 100, 0, 100, 'b')).ok());  // sender 20's message completes first
  ASSERT_TRUE(m.add(fragment(10, 1, 300, 216, 84, 'c')).ok());
  std::vector<Event> out;
  EXPECT_EQ(m.deliver(out, 64), 2u);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].context, 1u);
  EXPECT_EQ(out[0].length, 100u);
  EXPECT_EQ(b1[0], 'b');
  EXPECT_EQ(out[1].length, 300u);
  EXPECT_EQ(b2[0], 'a');
  EXPECT_EQ(b2[299], 'c');
}

// Resident memory of this process, from /proc/self/statm.
uint64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

// A first fragment only announces its message's length (any peer can write one such slot): the
// owner must not allocate that length up front, or two slots would cost it a GiB. Found by
// tests/fuzz/ipc_ring_fuzz.cc (1.3 GB resident after 20000 runs).
TEST(IpcAssembler, AnnouncedLengthsAreNotAllocatedUpFront) {
  MessageAssembler m;
  const uint64_t before = resident_bytes();
  for (uint32_t seq = 0; seq < 2; ++seq) {
    ASSERT_TRUE(m.add(fragment(10, seq, 512u << 20, 0, 216, 'a')).ok());
  }
  EXPECT_EQ(m.partial_count(), 2u);
  EXPECT_LT(resident_bytes(), before + (16u << 20)) << "announced lengths were allocated";
  // A message still reassembles whole from its fragments.
  std::vector<uint8_t> buf(300000);
  m.post_recv(false, {buf.data(), buf.size(), nullptr, 7});
  const uint32_t total = 300000;
  for (uint32_t off = 0; off < total; off += 216) {
    const uint16_t len = static_cast<uint16_t>(std::min<uint32_t>(216, total - off));
    ASSERT_TRUE(m.add(fragment(11, 1, total, off, len, static_cast<uint8_t>(off / 216))).ok());
  }
  std::vector<Event> out;
  ASSERT_EQ(m.deliver(out, 64), 1u);
  EXPECT_EQ(out[0].length, total);
  EXPECT_EQ(buf[0], 0);
  EXPECT_EQ(buf[216 * 5 + 3], 5);
  EXPECT_EQ(buf[total - 1], static_cast<uint8_t>((total - 1) / 216));
}

TEST(IpcAssembler, FragmentsThatDoNotContinueTheirMessageDropIt) {
  MessageAssembler m;
  EXPECT_FALSE(m.add(fragment(1, 1, 500, 216, 216, 'x')).ok()) << "no start";
  ASSERT_TRUE(m.add(fragment(1, 2, 500, 0, 216, 'x')).ok());
  EXPECT_FALSE(m.add(fragment(1, 2, 500, 300, 100, 'x')).ok()) << "gap";
  EXPECT_EQ(m.partial_count(), 0u);
  ASSERT_TRUE(m.add(fragment(1, 3, 500, 0, 216, 'x')).ok());
  EXPECT_FALSE(m.add(fragment(1, 3, 600, 216, 216, 'x')).ok()) << "another total";
  ASSERT_TRUE(m.add(fragment(1, 4, 100, 0, 50, 'x')).ok());
  EXPECT_FALSE(m.add(fragment(1, 4, 100, 50, 60, 'x')).ok()) << "past the end";
  ASSERT_TRUE(m.add(fragment(1, 5, 100, 0, 50, 'x')).ok());
  EXPECT_FALSE(m.add(fragment(1, 5, 100, 50, 50, 'x', /*control=*/true)).ok()) << "changes class";
  ASSERT_TRUE(m.add(fragment(1, 6, 100, 0, 50, 'x')).ok());
  EXPECT_FALSE(m.add(fragment(1, 6, 100, 50, 0, 'x')).ok()) << "empty fragment of a non-empty message";
  EXPECT_FALSE(m.add(fragment(1, 7, (1u << 30) + 1, 0, 10, 'x')).ok()) << "too long";
  EXPECT_EQ(m.waiting_count(), 0u);
}

TEST(IpcAssembler, PartialMessagesOfDeadSendersAreDropped) {
  MessageAssembler m;
  ASSERT_TRUE(m.add(fragment(111, 1, 500, 0, 216, 'x')).ok());
  ASSERT_TRUE(m.add(fragment(222, 1, 500, 0, 216, 'x')).ok());
  EXPECT_EQ(m.drop_partial_of([](uint32_t pid) { return pid == 222; }), 1u);
  EXPECT_EQ(m.partial_count(), 1u);
}

TEST(IpcAssembler, WaitingMessagesApplyBackPressure) {
  MessageAssembler m(/*max_waiting_bytes=*/1000);
  for (uint32_t i = 0; i < 5; ++i) ASSERT_TRUE(m.add(fragment(1, i, 200, 0, 200, 'x')).ok());
  EXPECT_FALSE(m.accepting());
  std::vector<uint8_t> buf(200);
  m.post_recv(false, {buf.data(), buf.size(), nullptr, 1});
  std::vector<Event> out;
  EXPECT_EQ(m.deliver(out, 64), 1u);
  EXPECT_TRUE(m.accepting());
}

TEST(IpcAssembler, DomainSkipsASlotClaimedByAProducerThatDied) {
  auto target = testing::open_domain(64);
  ASSERT_TRUE(target);
  // A real pid that is gone: a child that exited and was reaped.
  const pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  waitpid(child, nullptr, 0);
  Result<IpcAddress> address = IpcAddress::decode(target->address());
  ASSERT_TRUE(address.ok());
  Result<std::unique_ptr<ShmSegment>> seg = ShmSegment::attach(*address);
  ASSERT_TRUE(seg.ok()) << seg.status().to_string();
  RingView ring = (*seg)->ring();
  // The dead producer claimed position 0; a live one pushes an imm behind it.
  ring.slots[0].state.store(slot_word(0, SlotState::kClaimed, static_cast<uint32_t>(child)));
  ring.header->enqueue_pos.store(1);
  RingProducer producer(ring, static_cast<uint32_t>(getpid()));
  RecordHeader h;
  h.type = RecordType::kImm;
  h.value = 99;
  h.count = 3;
  ASSERT_EQ(producer.push(h), RingProducer::Push::kPushed);
  std::vector<Event> events;
  ASSERT_TRUE(testing::poll_until({target.get()}, {&events}, [&] { return testing::count_of(events, EventKind::kImm) >= 3; },
                                  std::chrono::seconds(5)));
  ASSERT_EQ(events.size(), 1u) << "one event for the record's 3 arrivals";
  EXPECT_EQ(events[0].kind, EventKind::kImm);
  EXPECT_EQ(events[0].imm, 99u);
  EXPECT_EQ(events[0].count, 3u);
}

}  // namespace
}  // namespace fabric_lib::transport::ipc

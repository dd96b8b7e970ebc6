// The ipc domain on host memory, two domains in one process (process_vm_writev into itself
// uses memcpy; the cross-process copies run in the integration matrix): writes with imms and
// data before imm, unordered completion, imm-only writes and coalescing under back-pressure,
// messages of every fragment size, truncation, control messages, bad keys and ranges, a closed
// peer and bad addresses.
#include <cstring>
#include <numeric>

#include "ipc_test_support.h"

namespace fabric_lib::transport::ipc {
namespace {

using testing::count_kind;
using testing::count_of;
using testing::open_domain;
using testing::Pair;
using testing::poll_until;
using testing::write_wr;

TEST(IpcDomain, InfoAndAddress) {
  auto d = open_domain();
  ASSERT_TRUE(d);
  EXPECT_EQ(d->info().transport, TransportKind::kSameHostIpc);
  EXPECT_EQ(d->info().provider, "ipc");
  EXPECT_TRUE(d->info().delivery_complete);
  EXPECT_TRUE(d->info().one_medium);
  EXPECT_TRUE(d->info().posts_issued_by_poll);  // the worker takes requests before a pass's polls only
  EXPECT_GE(d->wait_fd(), 0);
  Result<IpcAddress> a = IpcAddress::decode(d->address());
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->segment_name, d->segment_name());
}

TEST(IpcDomain, WriteLandsBeforeItsImmAndCompletesOnce) {
  Pair p;
  ASSERT_TRUE(p.a && p.b);
  constexpr size_t kBytes = (1 << 20) + 5;
  std::vector<uint8_t> src(kBytes), dst(kBytes + 64, 0);
  std::iota(src.begin(), src.end(), uint8_t{3});
  Result<DomainMr> smr = p.a->register_memory(src.data(), src.size(), Access::kLocalOnly, MemoryKind::kHost);
  Result<DomainMr> dmr = p.b->register_memory(dst.data(), dst.size(), Access::kRemoteWrite, MemoryKind::kHost);
  ASSERT_TRUE(smr.ok() && dmr.ok());
  EXPECT_EQ(dmr->addr_base, 0u);
  EXPECT_NE(dmr->rkey, 0u);
  Status error;
  ASSERT_EQ(p.a->post_write(write_wr(src.data(), smr->desc, kBytes, p.b_at_a, 64, dmr->rkey, 77u, 11), &error),
            PostResult::kPosted)
      << error.to_string();
  bool bytes_there_at_imm = false;
  ASSERT_TRUE(p.poll_until([&] {
    if (count_of(p.eb, EventKind::kImm) == 1 && !bytes_there_at_imm) {
      bytes_there_at_imm = std::memcmp(dst.data() + 64, src.data(), kBytes) == 0;
    }
    return count_of(p.eb, EventKind::kImm) == 1 && count_of(p.ea, EventKind::kWriteDone) == 1;
  }));
  EXPECT_TRUE(bytes_there_at_imm) << "the imm was reported before the bytes were in place";
  EXPECT_EQ(p.eb[0].imm, 77u);
  EXPECT_EQ(p.ea[0].context, 11u);
  EXPECT_EQ(p.ea[0].count, 1u);
  EXPECT_EQ(p.eb[0].count, 1u);
  EXPECT_TRUE(p.ea[0].status.ok());
  EXPECT_EQ(std::count(dst.begin(), dst.begin() + 64, 0), 64);
  // Nothing more arrives.
  for (int i = 0; i < 100; ++i) p.a->poll(p.ea, 64), p.b->poll(p.eb, 64);
  EXPECT_EQ(p.ea.size(), 1u);
  EXPECT_EQ(p.eb.size(), 1u);
  EXPECT_EQ(p.a->ops_in_flight(), 0u);
}

TEST(IpcDomain, SmallWritesOvertakeALargeOne) {
  Pair p;
  ASSERT_TRUE(p.a && p.b);
  constexpr size_t kLarge = 64 << 20;
  std::vector<uint8_t> src(kLarge, 1), dst(kLarge, 0);
  auto smr = p.a->register_memory(src.data(), src.size(), Access::kLocalOnly, MemoryKind::kHost);
  auto dmr = p.b->register_memory(dst.data(), dst.size(), Access::kRemoteWrite, MemoryKind::kHost);
  Status error;
  ASSERT_EQ(p.a->post_write(write_wr(src.data(), smr->desc, kLarge, p.b_at_a, 0, dmr->rkey, 1u, 1), &error), PostResult::kPosted);
  ASSERT_EQ(p.a->post_write(write_wr(src.data(), smr->desc, 4096, p.b_at_a, 0, dmr->rkey, 2u, 2), &error), PostResult::kPosted);
  ASSERT_TRUE(p.poll_until([&] { return count_of(p.ea, EventKind::kWriteDone) == 2; }));
  EXPECT_EQ(p.ea[0].context, 2u) << "completion is unordered: the 4 KiB write finishes first";
  EXPECT_EQ(p.ea[1].context, 1u);
}

TEST(IpcDomain, ImmOnlyWritesSurviveAFullRingAndCompleteAfterTheirPush) {
  constexpr uint32_t kImms = 10000;
  Pair p(/*b_slots=*/64, /*max_inflight=*/100000);
  ASSERT_TRUE(p.a && p.b);
  std::vector<uint8_t> dst(4096);
  auto dmr = p.b->register_memory(dst.data(), dst.size(), Access::kRemoteWrite, MemoryKind::kHost);
  Status error;
  // Alternate two values so that records cannot all coalesce: the 64-slot ring fills up.
  for (uint32_t i = 0; i < kImms; ++i) {
    ASSERT_EQ(p.a->post_write(write_wr(nullptr, nullptr, 0, p.b_at_a, 0, dmr->rkey, 5 + (i / 3) % 2, i), &error),
              PostResult::kPosted);
  }
  for (int i = 0; i < 50; ++i) p.a->poll(p.ea, 64);  // b does not read: a's completions must wait
  EXPECT_LT(count_of(p.ea, EventKind::kWriteDone), kImms);
  EXPECT_TRUE(p.a->has_deferred_work());
  ASSERT_TRUE(p.poll_until([&] { return count_of(p.eb, EventKind::kImm) == kImms && count_of(p.ea, EventKind::kWriteDone) == kImms; }));
  EXPECT_LT(count_kind(p.eb, EventKind::kImm), kImms) << "equal imms queued together arrive as one record";
  size_t fives = 0;
  for (const Event& e : p.eb) fives += e.imm == 5 ? e.count : 0;
  EXPECT_EQ(fives, (kImms / 6) * 3 + std::min<uint32_t>(kImms % 6, 3));
  for (const Event& e : p.ea) EXPECT_TRUE(e.status.ok());
}

TEST(IpcDomain, MessagesOfEveryFragmentSizeArriveWholeInPostedBuffers) {
  Pair p(/*b_slots=*/64);
  ASSERT_TRUE(p.a && p.b);
  const std::vector<size_t> sizes = {0, 1, kSlotPayloadBytes, kSlotPayloadBytes + 1, 5000, 70000};
  std::vector<std::vector<uint8_t>> msgs;
  Status error;
  // Sent before any receive is posted: they wait at the target.
  for (size_t i = 0; i < sizes.size(); ++i) {
    msgs.emplace_back(sizes[i]);
    for (size_t k = 0; k < sizes[i]; ++k) msgs.back()[k] = static_cast<uint8_t>(k * 31 + i);
    ASSERT_EQ(p.a->post_send({msgs.back().data(), sizes[i], nullptr, p.b_at_a, 100 + i}, &error), PostResult::kPosted);
  }
  ASSERT_TRUE(p.poll_until([&] { return count_kind(p.ea, EventKind::kSendDone) == sizes.size(); }));
  std::vector<std::vector<uint8_t>> bufs(sizes.size(), std::vector<uint8_t>(128 << 10, 0xee));
  for (size_t i = 0; i < bufs.size(); ++i) {
    ASSERT_EQ(p.b->post_recv({bufs[i].data(), bufs[i].size(), nullptr, 200 + i}, &error), PostResult::kPosted);
  }
  ASSERT_TRUE(p.poll_until([&] { return count_kind(p.eb, EventKind::kRecvDone) == sizes.size(); }));
  for (size_t i = 0; i < sizes.size(); ++i) {
    const Event& e = p.eb[i];
    ASSERT_EQ(e.context, 200 + i) << "buffers are used in posting order";
    EXPECT_TRUE(e.status.ok());
    ASSERT_EQ(e.length, sizes[i]);
    if (sizes[i] > 0) {
      EXPECT_EQ(std::memcmp(bufs[i].data(), msgs[i].data(), sizes[i]), 0) << "message " << i;
    }
  }
}

TEST(IpcDomain, LongMessageIsTruncatedWithAnError) {
  Pair p;
  ASSERT_TRUE(p.a && p.b);
  std::vector<uint8_t> msg(1000, 9), buf(100, 0);
  Status error;
  ASSERT_EQ(p.b->post_recv({buf.data(), buf.size(), nullptr, 1}, &error), PostResult::kPosted);
  ASSERT_EQ(p.a->post_send({msg.data(), msg.size(), nullptr, p.b_at_a, 2}, &error), PostResult::kPosted);
  ASSERT_TRUE(p.poll_until([&] { return count_kind(p.eb, EventKind::kRecvDone) == 1; }));
  EXPECT_EQ(p.eb[0].status.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(p.eb[0].length, 100u);
  EXPECT_EQ(std::count(buf.begin(), buf.end(), 9), 100);
}

TEST(IpcDomain, ControlMessagesUseTheirOwnBuffers) {
  Pair p;
  ASSERT_TRUE(p.a && p.b);
  EXPECT_TRUE(p.a->supports_control());
  std::vector<uint8_t> app(64, 0), control(64, 0);
  Status error;
  ASSERT_EQ(p.b->post_recv({app.data(), app.size(), nullptr, 1}, &error), PostResult::kPosted);
  ASSERT_EQ(p.b->post_control_recv({control.data(), control.size(), nullptr, 2}, &error), PostResult::kPosted);
  const char ping[] = "ping";
  ASSERT_EQ(p.a->post_control_send({ping, 4, nullptr, p.b_at_a, 3}, &error), PostResult::kPosted);
  ASSERT_TRUE(p.poll_until([&] {
    return count_kind(p.eb, EventKind::kControlRecvDone) == 1 && count_kind(p.ea, EventKind::kControlSendDone) == 1;
  }));
  EXPECT_EQ(count_kind(p.eb, EventKind::kRecvDone), 0u);
  EXPECT_EQ(p.eb[0].context, 2u);
  EXPECT_EQ(std::memcmp(control.data(), ping, 4), 0);
}

TEST(IpcDomain, ForgedKeysRangesAndUnregisteredRegionsFailOnTheWriter) {
  Pair p;
  ASSERT_TRUE(p.a && p.b);
  std::vector<uint8_t> src(8192, 7), dst(4096, 0);
  auto smr = p.a->register_memory(src.data(), src.size(), Access::kLocalOnly, MemoryKind::kHost);
  auto dmr = p.b->register_memory(dst.data(), dst.size(), Access::kRemoteWrite, MemoryKind::kHost);
  auto local_only = p.b->register_memory(dst.data(), dst.size(), Access::kLocalOnly, MemoryKind::kHost);
  Status error;
  EXPECT_EQ(p.a->post_write(write_wr(src.data(), smr->desc, 16, p.b_at_a, 0, dmr->rkey ^ 0x5a5a5a5a, 1u, 1), &error),
            PostResult::kFailed);
  EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument) << error.to_string();
  EXPECT_EQ(p.a->post_write(write_wr(nullptr, nullptr, 0, p.b_at_a, 0, dmr->rkey + 1, 1u, 1), &error), PostResult::kFailed);
  EXPECT_EQ(p.a->post_write(write_wr(src.data(), smr->desc, 16, p.b_at_a, 0, local_only->rkey, 1u, 1), &error),
            PostResult::kFailed)
      << "a local-only region has no key";
  EXPECT_EQ(p.a->post_write(write_wr(src.data(), smr->desc, 4097, p.b_at_a, 0, dmr->rkey, 1u, 1), &error), PostResult::kFailed);
  EXPECT_EQ(error.code(), ErrorCode::kOutOfRange);
  EXPECT_EQ(p.a->post_write(write_wr(src.data(), smr->desc, 16, p.b_at_a, 4090, dmr->rkey, 1u, 1), &error), PostResult::kFailed);
  EXPECT_EQ(p.a->post_write(write_wr(src.data() + 8000, smr->desc, 400, p.b_at_a, 0, dmr->rkey, 1u, 1), &error),
            PostResult::kFailed)
      << "source past its region";
  // A good write, then the target unregisters: the cached mapping must not be used again.
  ASSERT_EQ(p.a->post_write(write_wr(src.data(), smr->desc, 16, p.b_at_a, 0, dmr->rkey, 1u, 1), &error), PostResult::kPosted);
  ASSERT_TRUE(p.poll_until([&] { return count_of(p.eb, EventKind::kImm) == 1; }));
  p.b->unregister_memory(dmr->id);
  EXPECT_EQ(p.a->post_write(write_wr(src.data(), smr->desc, 16, p.b_at_a, 0, dmr->rkey, 1u, 1), &error), PostResult::kFailed);
  EXPECT_NE(error.message().find("unregistered"), std::string::npos) << error.message();
  // A new registration in the same table slot has a new key; the old one stays dead.
  auto again = p.b->register_memory(dst.data(), dst.size(), Access::kRemoteWrite, MemoryKind::kHost);
  EXPECT_NE(again->rkey, dmr->rkey);
  EXPECT_EQ(p.a->post_write(write_wr(src.data(), smr->desc, 16, p.b_at_a, 0, dmr->rkey, 1u, 1), &error), PostResult::kFailed);
  EXPECT_EQ(p.a->post_write(write_wr(src.data(), smr->desc, 16, p.b_at_a, 0, again->rkey, 1u, 1), &error), PostResult::kPosted);
  ASSERT_TRUE(p.poll_until([&] { return count_of(p.eb, EventKind::kImm) == 2; }));
}

TEST(IpcDomain, AClosedPeerFailsQueuedAndNewOperations) {
  Pair p(/*b_slots=*/64);
  ASSERT_TRUE(p.a && p.b);
  std::vector<uint8_t> dst(4096);
  auto dmr = p.b->register_memory(dst.data(), dst.size(), Access::kRemoteWrite, MemoryKind::kHost);
  const std::vector<uint8_t> b_address = p.b->address();
  Status error;
  constexpr uint32_t kOps = 500;  // more than the ring holds: some wait in a's outbox
  for (uint32_t i = 0; i < kOps; ++i) {
    ASSERT_EQ(p.a->post_write(write_wr(nullptr, nullptr, 0, p.b_at_a, 0, dmr->rkey, i, i), &error), PostResult::kPosted);
  }
  p.b.reset();  // b closes its domain
  ASSERT_TRUE(testing::poll_until({p.a.get()}, {&p.ea}, [&] { return count_of(p.ea, EventKind::kWriteDone) == kOps; }));
  size_t unreachable = 0;
  for (const Event& e : p.ea) unreachable += e.status.code() == ErrorCode::kPeerUnreachable ? e.count : 0;
  EXPECT_GT(unreachable, 0u);
  for (int i = 0; i < 100; ++i) p.a->poll(p.ea, 64);
  EXPECT_EQ(count_of(p.ea, EventKind::kWriteDone), kOps) << "every op completed once";
  // New operations are accepted and end with PeerUnreachable events (as connection errors do on a
  // NIC), so the worker learns that the path is down; so do those to a handle added afterwards.
  Result<PeerHandle> again = p.a->add_peer(b_address);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  p.ea.clear();
  for (PeerHandle h : {p.b_at_a, *again}) {
    EXPECT_EQ(p.a->post_write(write_wr(nullptr, nullptr, 0, h, 0, dmr->rkey, 1, 1), &error), PostResult::kPosted);
    EXPECT_EQ(p.a->post_send({nullptr, 0, nullptr, h, 2}, &error), PostResult::kPosted);
  }
  ASSERT_TRUE(testing::poll_until({p.a.get()}, {&p.ea}, [&] { return p.ea.size() == 4; }));
  for (const Event& e : p.ea) EXPECT_EQ(e.status.code(), ErrorCode::kPeerUnreachable) << e.status.to_string();
  p.a->remove_peer(p.b_at_a);
  p.a->remove_peer(*again);
  EXPECT_EQ(p.a->peers(), 0u);
}

// A peer removed while a copy to it is in flight stays until the copy ends, and the poll that
// ends it lets it go; a peer removed with nothing in flight goes at once.
TEST(IpcDomain, ARemovedPeerIsReleasedWhenItsLastOpEnds) {
  Pair p;
  ASSERT_TRUE(p.a && p.b);
  std::vector<uint8_t> src(1 << 20, 7), dst(1 << 20);
  auto smr = p.a->register_memory(src.data(), src.size(), Access::kLocalOnly, MemoryKind::kHost);
  auto dmr = p.b->register_memory(dst.data(), dst.size(), Access::kRemoteWrite, MemoryKind::kHost);
  ASSERT_TRUE(smr.ok() && dmr.ok());
  Result<PeerHandle> idle = p.a->add_peer(p.b->address());  // a second handle, with nothing in flight
  ASSERT_TRUE(idle.ok());
  ASSERT_EQ(p.a->peers(), 2u);
  Status error;
  // Host copies run inside poll(): until a poll, this one is in flight.
  ASSERT_EQ(p.a->post_write(write_wr(src.data(), smr->desc, src.size(), p.b_at_a, 0, dmr->rkey, 5u, 1), &error),
            PostResult::kPosted);
  p.a->remove_peer(p.b_at_a);
  EXPECT_EQ(p.a->peers(), 2u) << "released with its copy in flight";
  p.a->remove_peer(*idle);
  EXPECT_EQ(p.a->peers(), 1u) << "a peer with nothing in flight goes at once";
  ASSERT_TRUE(p.poll_until([&] { return count_of(p.ea, EventKind::kWriteDone) == 1; }));
  EXPECT_EQ(p.a->peers(), 0u) << "kept after its last op ended";
}

// Imms to four peers whose rings are full wait in their outboxes; one peer is removed with its
// outbox full (its items fail, and it is released at once); the other three then get every imm.
TEST(IpcDomain, OutboxesOfSeveralPeersDrainAfterOneIsRemoved) {
  constexpr size_t kPeers = 4;
  constexpr uint32_t kImms = 200;  // per peer; each its own record (alternating values), rings of 64
  auto a = open_domain();
  ASSERT_TRUE(a);
  std::vector<std::unique_ptr<IpcDomain>> b;
  std::vector<std::vector<uint8_t>> regions(kPeers, std::vector<uint8_t>(64));
  std::vector<uint64_t> rkeys;
  std::vector<PeerHandle> handles;
  for (size_t i = 0; i < kPeers; ++i) {
    b.push_back(open_domain(/*slots=*/64));
    ASSERT_TRUE(b.back());
    auto mr = b.back()->register_memory(regions[i].data(), regions[i].size(), Access::kRemoteWrite, MemoryKind::kHost);
    ASSERT_TRUE(mr.ok());
    rkeys.push_back(mr->rkey);
    Result<PeerHandle> h = a->add_peer(b.back()->address());
    ASSERT_TRUE(h.ok());
    handles.push_back(*h);
  }
  Status error;
  for (uint32_t k = 0; k < kImms; ++k) {
    for (size_t i = 0; i < kPeers; ++i) {
      const uint32_t imm = static_cast<uint32_t>(1000 * i) + k % 2;
      ASSERT_EQ(a->post_write(write_wr(nullptr, nullptr, 0, handles[i], 0, rkeys[i], imm, i), &error), PostResult::kPosted);
    }
  }
  std::vector<Event> ea;
  for (int n = 0; n < 10; ++n) a->poll(ea, 64);  // the targets do not poll: their rings stay full
  ASSERT_LT(count_of(ea, EventKind::kWriteDone), kPeers * kImms) << "the rings did not fill";
  a->remove_peer(handles[1]);
  EXPECT_EQ(a->peers(), kPeers - 1) << "a removed peer whose queued items failed is released at once";
  std::vector<std::vector<Event>> eb(kPeers);
  std::vector<IpcDomain*> domains = {a.get()};
  std::vector<std::vector<Event>*> events = {&ea};
  for (size_t i = 0; i < kPeers; ++i) {
    domains.push_back(b[i].get());
    events.push_back(&eb[i]);
  }
  ASSERT_TRUE(testing::poll_until(domains, events, [&] { return count_of(ea, EventKind::kWriteDone) == kPeers * kImms; }));
  size_t failed = 0;
  for (const Event& e : ea) failed += e.kind == EventKind::kWriteDone && !e.status.ok() ? e.count : 0;
  EXPECT_GT(failed, 0u);
  EXPECT_LE(failed, kImms);
  for (size_t i = 0; i < kPeers; ++i) {
    if (i == 1) continue;
    ASSERT_TRUE(testing::poll_until({b[i].get()}, {&eb[i]}, [&] { return count_of(eb[i], EventKind::kImm) == kImms; }))
        << "peer " << i << " got " << count_of(eb[i], EventKind::kImm) << " of its imms";
  }
}

TEST(IpcDomain, AddPeerRejectsForeignAndBrokenAddresses) {
  auto a = open_domain();
  auto b = open_domain();
  ASSERT_TRUE(a && b);
  Result<IpcAddress> addr = IpcAddress::decode(b->address());
  ASSERT_TRUE(addr.ok());
  IpcAddress other_host = *addr;
  other_host.owner.boot_id[3] ^= 0x10;
  Result<PeerHandle> h = a->add_peer(other_host.encode());
  EXPECT_EQ(h.status().code(), ErrorCode::kPeerUnreachable);
  EXPECT_NE(h.status().message().find("another host"), std::string::npos) << h.status().message();
  // A stale address (the segment exists but is another domain's) and a missing segment are peers
  // that are gone: accepted, and every operation to them ends with PeerUnreachable.
  IpcAddress stale = *addr;
  stale.nonce ^= 1;
  IpcAddress missing = *addr;
  missing.segment_name = "fabric-lib-nvl-no-such-segment";
  std::vector<Event> events;
  for (const IpcAddress& gone : {stale, missing}) {
    Result<PeerHandle> g = a->add_peer(gone.encode());
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    Status error;
    EXPECT_EQ(a->post_send({nullptr, 0, nullptr, *g, 1}, &error), PostResult::kPosted);
  }
  ASSERT_TRUE(testing::poll_until({a.get()}, {&events}, [&] { return events.size() == 2; }));
  EXPECT_EQ(events[0].status.code(), ErrorCode::kPeerUnreachable);
  EXPECT_NE(events[0].status.message().find("another domain"), std::string::npos) << events[0].status.message();
  EXPECT_EQ(events[1].status.code(), ErrorCode::kPeerUnreachable);
  const std::vector<uint8_t> garbage = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  EXPECT_EQ(a->add_peer(garbage).status().code(), ErrorCode::kMalformed);
  EXPECT_TRUE(a->add_peer(b->address()).ok());
}

TEST(IpcDomain, CudaMemoryWithoutABackendIsUnsupported) {
  auto d = open_domain();
  ASSERT_TRUE(d);
  std::vector<uint8_t> buf(64);
  Result<DomainMr> mr = d->register_memory(buf.data(), buf.size(), Access::kRemoteWrite, MemoryKind::kCuda);
  EXPECT_EQ(mr.status().code(), ErrorCode::kUnsupported);
  EXPECT_EQ(d->register_memory(buf.data(), buf.size(), Access::kRemoteWrite, MemoryKind::kAuto).status().code(),
            ErrorCode::kInvalidArgument);
}

TEST(IpcDomain, RegistrationTableIsBounded) {
  auto d = open_domain();  // 64 table entries
  ASSERT_TRUE(d);
  std::vector<uint8_t> buf(64);
  std::vector<uint64_t> ids;
  for (int i = 0; i < 64; ++i) {
    auto mr = d->register_memory(buf.data(), buf.size(), Access::kRemoteWrite, MemoryKind::kHost);
    ASSERT_TRUE(mr.ok());
    ids.push_back(mr->id);
  }
  EXPECT_EQ(d->register_memory(buf.data(), buf.size(), Access::kRemoteWrite, MemoryKind::kHost).status().code(),
            ErrorCode::kResourceExhausted);
  EXPECT_TRUE(d->register_memory(buf.data(), buf.size(), Access::kLocalOnly, MemoryKind::kHost).ok()) << "local-only needs no entry";
  d->unregister_memory(ids[10]);
  EXPECT_TRUE(d->register_memory(buf.data(), buf.size(), Access::kRemoteWrite, MemoryKind::kHost).ok());
}

}  // namespace
}  // namespace fabric_lib::transport::ipc

// ReorderingDomain: the test-only wrapper that breaks ordering on purpose. It must reorder, but
// never lose, duplicate or invent a WR, a completion or an imm.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <vector>

#include "transport/guard/guarded_domain.h"
#include "transport/reorder/reordering_domain.h"

namespace fabric_lib::transport {
namespace {

// A Domain that records what is posted to it and completes every posted WR at the next poll().
class FakeDomain final : public Domain {
 public:
  FakeDomain() {
    info_.provider = "fake";
    info_.name = "fake0";
    info_.max_inflight = 1024;
    address_ = {1, 2, 3, 4};
  }

  const DomainInfo& info() const override { return info_; }
  const std::vector<uint8_t>& address() const override { return address_; }
  Result<DomainMr> register_memory(void*, size_t length, Access, MemoryKind) override {
    DomainMr mr;
    mr.id = ++registered;
    mr.rkey = 1000 + length;
    return mr;
  }
  void unregister_memory(uint64_t mr_id) override { unregistered.push_back(mr_id); }
  Result<PeerHandle> add_peer(std::span<const uint8_t> address) override { return PeerHandle{address.size()}; }
  void remove_peer(PeerHandle) override {}

  PostResult post_write(const WriteWr& wr, Status* error) override { return post(wr.context, false, error); }
  PostResult post_send(const SendWr& wr, Status* error) override { return post(wr.context, true, error); }
  PostResult post_recv(const RecvWr& wr, Status*) override {
    recvs.push_back(wr.context);
    return PostResult::kPosted;
  }

  size_t poll(std::vector<Event>& out, size_t max) override {
    ++polls;
    size_t n = 0;
    while (n < max && !pending.empty()) {
      Event ev;
      ev.kind = pending.front().second ? EventKind::kSendDone : EventKind::kWriteDone;
      ev.context = pending.front().first;
      out.push_back(ev);
      pending.erase(pending.begin());
      ++n;
    }
    while (n < max && !imms.empty()) {
      Event ev;
      ev.kind = EventKind::kImm;
      ev.imm = imms.front();
      out.push_back(ev);
      imms.erase(imms.begin());
      ++n;
    }
    emitted += n;
    return n;
  }

  bool ready_to_block() override { return pending.empty() && imms.empty(); }
  int wait_fd() const override { return 77; }

  bool idle() const { return pending.empty() && imms.empty(); }

  // Knobs.
  int again_for_first = 0;          // this many post attempts return kAgain
  std::set<uint64_t> fail_contexts;  // posts of these contexts return kFailed

  // Observations.
  int attempts = 0;
  std::vector<uint64_t> posted;  // contexts accepted, in inner posting order
  std::vector<std::pair<uint64_t, bool>> pending;
  std::vector<uint32_t> imms;  // injected, reported at the next poll
  std::vector<uint64_t> recvs;
  std::vector<uint64_t> unregistered;
  uint64_t registered = 0;
  size_t polls = 0;
  size_t emitted = 0;

 private:
  PostResult post(uint64_t context, bool send, Status* error) {
    ++attempts;
    if (attempts <= again_for_first) return PostResult::kAgain;
    if (fail_contexts.count(context)) {
      *error = Status(ErrorCode::kProviderError, "injected failure of " + std::to_string(context));
      return PostResult::kFailed;
    }
    posted.push_back(context);
    pending.push_back({context, send});
    return PostResult::kPosted;
  }

  DomainInfo info_;
  std::vector<uint8_t> address_;
};

struct Harness {
  explicit Harness(uint64_t seed) {
    auto f = std::make_unique<FakeDomain>();
    fake = f.get();
    domain = std::make_unique<ReorderingDomain>(std::move(f), seed);
  }
  PostResult write(uint64_t context, uint32_t imm = 0) {
    WriteWr wr;
    wr.context = context;
    wr.length = 8;
    wr.has_imm = true;
    wr.imm = imm;
    Status error;
    return domain->post_write(wr, &error);
  }
  // Polls (with `max` per call) until neither the wrapper nor the fake holds anything.
  std::vector<Event> drain(size_t max = 64, size_t limit = 10000) {
    std::vector<Event> events;
    for (size_t i = 0; i < limit; ++i) {
      domain->poll(events, max);
      if (!domain->has_deferred_work() && fake->idle()) {
        // One more poll: nothing may come out of an idle wrapper.
        const size_t before = events.size();
        domain->poll(events, max);
        EXPECT_EQ(events.size(), before);
        return events;
      }
    }
    ADD_FAILURE() << "did not drain in " << limit << " polls";
    return events;
  }
  FakeDomain* fake;
  std::unique_ptr<ReorderingDomain> domain;
};

std::vector<uint64_t> iota_vec(uint64_t n) {
  std::vector<uint64_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

// Every WR of a 64-WR burst reaches the inner domain exactly once, and every completion comes
// out of poll() exactly once with its context and an Ok status.
TEST(ReorderingDomain, EveryWrPostedAndCompletedOnce) {
  Harness h(1);
  for (uint64_t i = 0; i < 64; ++i) ASSERT_EQ(h.write(i), PostResult::kPosted);
  std::vector<Event> events = h.drain();
  std::vector<uint64_t> posted = h.fake->posted;
  std::sort(posted.begin(), posted.end());
  EXPECT_EQ(posted, iota_vec(64));
  std::vector<uint64_t> completed;
  for (const Event& e : events) {
    EXPECT_EQ(e.kind, EventKind::kWriteDone);
    EXPECT_TRUE(e.status.ok());
    completed.push_back(e.context);
  }
  std::sort(completed.begin(), completed.end());
  EXPECT_EQ(completed, iota_vec(64));
}

// With a fixed seed the inner posting order is a shuffle of the submission order: each window
// of kWindow WRs is posted as a permutation of itself, and the whole burst is not in order.
// The same seed gives the same order (runs are reproducible); another seed a different one.
TEST(ReorderingDomain, ShufflesPostingOrderDeterministically) {
  auto order_for = [](uint64_t seed) {
    Harness h(seed);
    for (uint64_t i = 0; i < 64; ++i) h.write(i);
    return h.fake->posted;  // 64 = 4 full windows: all flushed without a poll
  };
  const std::vector<uint64_t> a = order_for(12345);
  ASSERT_EQ(a.size(), 64u);
  EXPECT_NE(a, iota_vec(64));
  for (size_t w = 0; w < 64 / ReorderingDomain::kWindow; ++w) {
    std::vector<uint64_t> window(a.begin() + w * ReorderingDomain::kWindow,
                                 a.begin() + (w + 1) * ReorderingDomain::kWindow);
    std::sort(window.begin(), window.end());
    for (size_t i = 0; i < window.size(); ++i) EXPECT_EQ(window[i], w * ReorderingDomain::kWindow + i);
  }
  EXPECT_EQ(order_for(12345), a);
  EXPECT_NE(order_for(54321), a);
}

// Fewer WRs than a window are held until the next poll, then posted; has_deferred_work() and
// ready_to_block() say so meanwhile.
TEST(ReorderingDomain, PartialWindowIsFlushedByPoll) {
  Harness h(3);
  for (uint64_t i = 0; i < 5; ++i) h.write(i);
  EXPECT_TRUE(h.fake->posted.empty());
  EXPECT_TRUE(h.domain->has_deferred_work());
  EXPECT_FALSE(h.domain->ready_to_block());
  std::vector<Event> first;
  h.domain->poll(first, 64);
  EXPECT_EQ(h.fake->posted.size(), 5u);
  std::vector<Event> rest = h.drain();
  first.insert(first.end(), rest.begin(), rest.end());
  std::multiset<uint64_t> got;
  for (const Event& e : first) got.insert(e.context);
  EXPECT_EQ(got, (std::multiset<uint64_t>{0, 1, 2, 3, 4}));
  EXPECT_FALSE(h.domain->has_deferred_work());
  EXPECT_TRUE(h.domain->ready_to_block());
}

// Completions and imms are held back and released in a different order, but each comes out
// exactly once; `max` per poll is respected and nothing is lost when it cuts a poll short.
TEST(ReorderingDomain, EventsHeldBackButNeverLost) {
  for (size_t max : {size_t{1}, size_t{3}, size_t{64}}) {
    Harness h(777 + max);
    std::vector<uint32_t> injected;
    for (uint32_t i = 0; i < 50; ++i) injected.push_back(1000 + i);
    h.fake->imms = injected;
    for (uint64_t i = 0; i < 64; ++i) h.write(i);
    ASSERT_EQ(h.fake->posted.size(), 64u);

    // Run it poll by poll, watching the per-call limit and whether anything was held back.
    std::vector<Event> events;
    bool held_something = false;
    for (int i = 0; i < 20000 && (h.domain->has_deferred_work() || !h.fake->idle()); ++i) {
      const size_t emitted_before = h.fake->emitted;
      std::vector<Event> batch = {Event{}};  // poll appends
      const size_t n = h.domain->poll(batch, max);
      ASSERT_EQ(batch.size(), n + 1);
      ASSERT_LE(n, max);
      if (h.fake->emitted - emitted_before > n) held_something = true;
      events.insert(events.end(), batch.begin() + 1, batch.end());
    }
    EXPECT_FALSE(h.domain->has_deferred_work());
    EXPECT_TRUE(held_something) << "max=" << max;

    std::vector<uint64_t> completions;
    std::vector<uint32_t> imms;
    std::vector<uint64_t> arrival;  // completion contexts in output order
    for (const Event& e : events) {
      if (e.kind == EventKind::kImm) {
        imms.push_back(e.imm);
      } else {
        ASSERT_EQ(e.kind, EventKind::kWriteDone);
        EXPECT_TRUE(e.status.ok());
        completions.push_back(e.context);
      }
    }
    arrival = completions;
    std::sort(completions.begin(), completions.end());
    std::sort(imms.begin(), imms.end());
    EXPECT_EQ(completions, iota_vec(64)) << "max=" << max;
    EXPECT_EQ(imms, injected) << "max=" << max;
    EXPECT_NE(arrival, h.fake->posted) << "completions should not come out in inner order";
  }
}

// WRs the inner domain refuses with kAgain are kept and retried at later polls until accepted:
// each reaches the inner domain exactly once and completes once.
TEST(ReorderingDomain, RetriesAgain) {
  Harness h(5);
  h.fake->again_for_first = 10;
  for (uint64_t i = 0; i < 16; ++i) ASSERT_EQ(h.write(i), PostResult::kPosted);
  EXPECT_EQ(h.fake->posted.size(), 6u);  // one window flushed: 10 refused, 6 accepted
  EXPECT_TRUE(h.domain->has_deferred_work());
  std::vector<Event> events = h.drain();
  std::vector<uint64_t> posted = h.fake->posted;
  std::sort(posted.begin(), posted.end());
  EXPECT_EQ(posted, iota_vec(16));
  EXPECT_EQ(h.fake->attempts, 26);
  std::vector<uint64_t> completed;
  for (const Event& e : events) completed.push_back(e.context);
  std::sort(completed.begin(), completed.end());
  EXPECT_EQ(completed, iota_vec(16));
}

// kAgain on many consecutive flushes (longer than a window's worth) still loses nothing.
TEST(ReorderingDomain, RetriesAgainAcrossManyPolls) {
  Harness h(6);
  h.fake->again_for_first = 200;
  for (uint64_t i = 0; i < 40; ++i) h.write(i);
  std::vector<Event> events = h.drain();
  std::vector<uint64_t> posted = h.fake->posted;
  std::sort(posted.begin(), posted.end());
  EXPECT_EQ(posted, iota_vec(40));
  EXPECT_EQ(events.size(), 40u);
}

// A WR the inner domain rejects (kFailed) surfaces as exactly one completion event for that
// WR's context carrying the inner error; the others complete Ok. Same for sends.
TEST(ReorderingDomain, FailedPostBecomesErrorEvent) {
  Harness h(9);
  h.fake->fail_contexts = {7, 100};
  for (uint64_t i = 0; i < 16; ++i) h.write(i);
  SendWr send;
  send.context = 100;
  Status error;
  ASSERT_EQ(h.domain->post_send(send, &error), PostResult::kPosted);
  send.context = 101;
  ASSERT_EQ(h.domain->post_send(send, &error), PostResult::kPosted);
  std::vector<Event> events = h.drain();
  ASSERT_EQ(events.size(), 18u);
  std::map<uint64_t, int> seen;
  for (const Event& e : events) {
    ++seen[e.context];
    if (e.context == 7) {
      EXPECT_EQ(e.kind, EventKind::kWriteDone);
      EXPECT_EQ(e.status.code(), ErrorCode::kProviderError);
      EXPECT_NE(e.status.message().find("injected failure of 7"), std::string::npos) << e.status.message();
    } else if (e.context == 100) {
      EXPECT_EQ(e.kind, EventKind::kSendDone);
      EXPECT_EQ(e.status.code(), ErrorCode::kProviderError);
    } else if (e.context == 101) {
      EXPECT_EQ(e.kind, EventKind::kSendDone);
      EXPECT_TRUE(e.status.ok());
    } else {
      EXPECT_EQ(e.kind, EventKind::kWriteDone);
      EXPECT_TRUE(e.status.ok()) << e.context;
    }
  }
  EXPECT_EQ(seen.size(), 18u);
  for (const auto& [ctx, n] : seen) EXPECT_EQ(n, 1) << ctx;
  EXPECT_EQ(std::count(h.fake->posted.begin(), h.fake->posted.end(), 7u), 0);
}

// The counters that prove the wrapper is on (EngineStats::unordered_*): windows of two or more WRs
// shuffled (a lone WR flushed by a poll is no shuffle), events held back (each one later comes
// out); the guard decorator the worker puts on top hands them through.
TEST(ReorderingDomain, CountersSayWhatItShuffledAndHeld) {
  Harness h(99);
  std::shared_ptr<const DomainCounters> c = h.domain->counters();
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(FakeDomain().counters(), nullptr);  // a domain that keeps none
  ASSERT_EQ(h.write(0), PostResult::kPosted);
  std::vector<Event> events = h.drain();
  EXPECT_EQ(c->unordered_windows_shuffled.load(), 0u) << "one WR is no window";
  for (uint64_t i = 1; i <= 64; ++i) ASSERT_EQ(h.write(i), PostResult::kPosted);
  EXPECT_EQ(c->unordered_windows_shuffled.load(), 64 / ReorderingDomain::kWindow);
  h.fake->imms = std::vector<uint32_t>(64, 5);
  std::vector<Event> more = h.drain(64);
  events.insert(events.end(), more.begin(), more.end());
  EXPECT_EQ(events.size(), 65u + 64u);
  // One event in kHoldOneIn is held: of 129, some are (none held has probability (2/3)^129).
  EXPECT_GT(c->unordered_events_held.load(), 0u);
  EXPECT_LT(c->unordered_events_held.load(), events.size());

  GuardedDomain guarded(std::move(h.domain), std::make_shared<ProviderCallGuard>());
  EXPECT_EQ(guarded.counters(), c);
}

// Everything that is not WRITE/SEND posting or polling passes straight through to the inner domain.
TEST(ReorderingDomain, DelegatesToInner) {
  Harness h(2);
  EXPECT_EQ(h.domain->info().provider, "fake");
  EXPECT_EQ(h.domain->address(), (std::vector<uint8_t>{1, 2, 3, 4}));
  EXPECT_EQ(h.domain->wait_fd(), 77);
  uint8_t buf[16];
  Result<DomainMr> mr = h.domain->register_memory(buf, sizeof(buf), Access::kRemoteWrite, MemoryKind::kHost);
  ASSERT_TRUE(mr.ok());
  EXPECT_EQ(mr->rkey, 1016u);
  h.domain->unregister_memory(mr->id);
  EXPECT_EQ(h.fake->unregistered, std::vector<uint64_t>{mr->id});
  const uint8_t addr[5] = {};
  Result<PeerHandle> peer = h.domain->add_peer(addr);
  ASSERT_TRUE(peer.ok());
  EXPECT_EQ(*peer, 5u);
  RecvWr recv;
  recv.context = 55;
  Status error;
  EXPECT_EQ(h.domain->post_recv(recv, &error), PostResult::kPosted);
  EXPECT_EQ(h.fake->recvs, std::vector<uint64_t>{55});
}

}  // namespace
}  // namespace fabric_lib::transport

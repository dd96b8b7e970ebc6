// cancel(TransferId) in each state of a request, made deterministic by a gate in front of the
// writer's provider (gate_domain.h): before any WR was posted, with k of its WRs posted (their
// completions held back), racing stop() from another thread, and racing a peer that fails. Two
// engines over tcp on lo in this process; the target's imm counts and bytes are checked.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "fabric_lib/fabric_lib.h"
#include "gate_domain.h"
#include "support/eventually.h"

namespace fabric_lib::testing {
namespace {

using namespace std::chrono_literals;

constexpr size_t kDomains = 2;
constexpr uint64_t kPage = 4096;
constexpr uint32_t kPages = 32;

TransferEngineBuilder tcp_builder() {
  TransferEngineBuilder b;
  b.provider("tcp").interfaces({"lo"}).domains_per_group(kDomains).stall_timeout(std::chrono::nanoseconds(0));
  return b;
}

// A target engine with a zeroed region, and a writer whose domains go through a gate.
struct Pair {
  std::shared_ptr<Gate> gate = std::make_shared<Gate>();
  std::vector<uint8_t> dst = std::vector<uint8_t>(kPages * kPage, 0);
  std::vector<uint8_t> src = std::vector<uint8_t>(kPages * kPage);
  std::unique_ptr<TransferEngine> target, writer;
  MrRegistration dst_reg, src_reg;

  void start() {
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 131 + 7);
    auto t = tcp_builder().build();
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    target = std::move(t).value();
    TransferEngineBuilder b = tcp_builder();
    gate_domains(b, gate);
    auto w = b.build();
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    writer = std::move(w).value();
    auto d = target->register_memory(dst.data(), dst.size(), Access::kRemoteWrite);
    ASSERT_TRUE(d.ok());
    dst_reg = *d;
    auto s = writer->register_memory(src.data(), src.size(), Access::kLocalOnly);
    ASSERT_TRUE(s.ok());
    src_reg = *s;
  }
  ~Pair() {
    if (writer) writer->stop();
    if (target) target->stop();
  }
  // All kPages pages, page p to page p, with `imm`.
  PagedWriteRequest all_pages(uint32_t imm) const {
    PagedWriteRequest p{src_reg.handle, dst_reg.desc, kPage, {}, {}, kPage, kPage, 0, 0, imm};
    for (uint32_t i = 0; i < kPages; ++i) {
      p.src_pages.push_back(i);
      p.dst_pages.push_back(i);
    }
    return p;
  }
  // What the target must hold when exactly the pages whose sources were posted have landed.
  std::vector<uint8_t> expected_from_posted() {
    std::vector<uint8_t> want(dst.size(), 0);
    std::lock_guard lock(gate->mu);
    for (const void* p : gate->posted_sources) {
      const size_t off = static_cast<const uint8_t*>(p) - src.data();
      std::copy_n(src.data() + off, kPage, want.data() + off);
    }
    return want;
  }
  // A one-page write with `imm` through an open gate, landed at the target: everything posted
  // before it has had its chance to arrive.
  void marker(uint32_t imm) {
    gate->budget = -1;
    gate->open = true;
    gate->hold_completions = false;
    CompletionCounter c;
    ASSERT_TRUE(writer->submit_write({src_reg.handle, 0, dst_reg.desc, 0, 1, imm}, Completion::counter(c)).ok());
    ASSERT_TRUE(c.wait_for(1, 10s));
    ASSERT_TRUE(eventually([&] { return target->imms().count(imm) == 1; }));
  }
};

TEST(CancelStates, BeforeAnyPostItCompletesCancelledAtOnceAndNothingReachesTheTarget) {
  Pair p;
  p.start();
  ASSERT_TRUE(p.writer);
  p.gate->open = false;
  CompletionCounter done;
  Status outcome;
  std::mutex mu;
  Result<TransferId> id = p.writer->submit_paged_writes(p.all_pages(900), Completion::callback([&](const Status& s) {
    std::lock_guard lock(mu);
    outcome = s;
    done.done.fetch_add(1);
  }));
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(eventually([&] { return p.gate->refused.load() > 0; }));  // the worker tried, and was held back
  EXPECT_EQ(p.gate->posted.load(), 0u);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(p.writer->cancel(*id).ok());
  ASSERT_TRUE(done.wait_for(1, 2s));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);  // at once: nothing posted to wait for
  {
    std::lock_guard lock(mu);
    EXPECT_EQ(outcome.code(), ErrorCode::kCancelled) << outcome.to_string();
  }
  EXPECT_EQ(p.writer->cancel(*id).code(), ErrorCode::kNotFound);
  // Opened again: only the marker is posted; the cancelled WRs are gone.
  p.marker(901);
  EXPECT_EQ(p.gate->posted.load(), 1u);
  EXPECT_EQ(p.target->imms().count(900), 0u);
  std::vector<uint8_t> want(p.dst.size(), 0);
  want[0] = p.src[0];  // the marker's one byte
  EXPECT_EQ(p.dst, want);
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(done.finished(), 1u);
}

// TransferIds name a slot of the request slab and its generation (RequestPool): the request
// that reuses a cancelled one's slot gets a new id, and the old id neither finds nor cancels it.
TEST(CancelStates, AStaleIdDoesNotCancelTheRequestThatReusedItsSlot) {
  Pair p;
  p.start();
  ASSERT_TRUE(p.writer);
  p.gate->open = false;
  CompletionCounter first_done;
  Result<TransferId> first = p.writer->submit_paged_writes(p.all_pages(920), Completion::counter(first_done));
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(p.writer->cancel(*first).ok());
  ASSERT_TRUE(first_done.wait_for(1, 2s));
  // The worker gives a request back just after its completion: submit (and cancel) until a
  // request lands in the first one's slot. Nothing is posted meanwhile (the gate is closed).
  Status outcome;
  std::mutex mu;
  CompletionCounter second_done;
  Result<TransferId> second = invalid_argument("not submitted");
  for (int attempt = 0; attempt < 100; ++attempt) {
    second = p.writer->submit_paged_writes(p.all_pages(921), Completion::callback([&](const Status& s) {
      std::lock_guard lock(mu);
      outcome = s;
      second_done.done.fetch_add(1);
    }));
    ASSERT_TRUE(second.ok());
    if ((*second & 0xffffffffu) == (*first & 0xffffffffu)) break;
    ASSERT_TRUE(p.writer->cancel(*second).ok());
    ASSERT_TRUE(second_done.wait_for(1, 2s));
    second_done.done.store(0);
  }
  EXPECT_NE(*second, *first);
  ASSERT_EQ(*second & 0xffffffffu, *first & 0xffffffffu) << "no request reused the first one's slot";
  EXPECT_EQ(p.writer->cancel(*first).code(), ErrorCode::kNotFound);
  p.gate->open = true;
  ASSERT_TRUE(second_done.wait_for(1, 10s));
  {
    std::lock_guard lock(mu);
    EXPECT_TRUE(outcome.ok()) << outcome.to_string();
  }
  ASSERT_TRUE(eventually([&] { return p.target->imms().count(921) == kPages; }));
  EXPECT_EQ(p.dst, p.src);
  EXPECT_EQ(p.target->imms().count(920), 0u);
  EXPECT_EQ(p.writer->cancel(*second).code(), ErrorCode::kNotFound);
}

TEST(CancelStates, WithSomeWrsPostedItWaitsForThemAndTheTargetCountsOnlyThem) {
  constexpr int64_t kPosted = 5;
  Pair p;
  p.start();
  ASSERT_TRUE(p.writer);
  p.gate->budget = kPosted;
  p.gate->hold_completions = true;
  CompletionCounter done;
  Status outcome;
  std::mutex mu;
  Result<TransferId> id = p.writer->submit_paged_writes(p.all_pages(910), Completion::callback([&](const Status& s) {
    std::lock_guard lock(mu);
    outcome = s;
    done.done.fetch_add(1);
  }));
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(eventually([&] { return p.gate->posted.load() == kPosted && p.gate->refused.load() > 0; }));
  // The posted pages reach the target (their local completions are what the gate holds).
  ASSERT_TRUE(eventually([&] { return p.target->imms().count(910) == kPosted; }));
  ASSERT_TRUE(eventually([&] { return p.gate->completed.load() == kPosted; }));
  ASSERT_TRUE(p.writer->cancel(*id).ok());
  // Its posted WRs have not completed yet, so neither has the request.
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(done.finished(), 0u);
  EXPECT_EQ(p.writer->cancel(*id).ok(), true);  // still in flight: a second cancel is harmless
  p.gate->hold_completions = false;
  ASSERT_TRUE(done.wait_for(1, 5s));
  {
    std::lock_guard lock(mu);
    EXPECT_EQ(outcome.code(), ErrorCode::kCancelled) << outcome.to_string();
  }
  std::vector<uint8_t> want = p.expected_from_posted();  // the five posted pages
  want[0] = p.src[0];                                     // and the marker's byte
  p.marker(911);
  EXPECT_EQ(p.gate->posted.load(), kPosted + 1);  // nothing more of the cancelled request
  EXPECT_EQ(p.target->imms().count(910), static_cast<uint64_t>(kPosted));
  EXPECT_EQ(p.dst, want);
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(done.finished(), 1u);
}

// Records each request's completions (exactly-once) and outcome codes.
struct Record {
  explicit Record(size_t n) : calls(n) {}
  std::vector<std::atomic<int>> calls;
  std::mutex mu;
  std::map<ErrorCode, size_t> codes;
  std::atomic<size_t> finished{0};
  Completion sink(size_t i) {
    return Completion::callback([this, i](const Status& s) {
      calls[i].fetch_add(1);
      {
        std::lock_guard lock(mu);
        codes[s.code()]++;
      }
      finished.fetch_add(1);
    });
  }
};

TEST(CancelStates, RacingStopEachRequestCompletesOnceAndCancelAnswersOkNotFoundOrStopped) {
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    constexpr size_t kRequests = 600;
    Record rec(kRequests);
    Pair p;
    p.start();
    ASSERT_TRUE(p.writer);
    p.gate->budget = 150 + 100 * round;  // some posted (and completing), the rest held back
    std::vector<TransferId> ids;
    for (size_t i = 0; i < kRequests; ++i) {
      const uint64_t off = (i % kPages) * kPage;
      auto id = p.writer->submit_write({p.src_reg.handle, off, p.dst_reg.desc, off, kPage, 920}, rec.sink(i));
      ASSERT_TRUE(id.ok());
      ids.push_back(*id);
    }
    std::mt19937 rng(round);
    std::shuffle(ids.begin(), ids.end(), rng);
    std::map<ErrorCode, size_t> answers;
    std::thread canceller([&] {
      for (TransferId id : ids) answers[p.writer->cancel(id).code()]++;
    });
    std::this_thread::sleep_for(std::chrono::microseconds(300 * round));
    ASSERT_TRUE(p.writer->stop().ok());
    canceller.join();
    EXPECT_EQ(rec.finished.load(), kRequests);  // stop() returns after every completion ran
    for (size_t i = 0; i < kRequests; ++i) ASSERT_EQ(rec.calls[i].load(), 1) << "request " << i;
    EXPECT_EQ(rec.codes[ErrorCode::kOk] + rec.codes[ErrorCode::kCancelled], kRequests);
    size_t answered = 0;
    for (const auto& [code, n] : answers) {
      EXPECT_TRUE(code == ErrorCode::kOk || code == ErrorCode::kNotFound || code == ErrorCode::kStopped)
          << error_code_name(code);
      answered += n;
    }
    EXPECT_EQ(answered, kRequests);
  }
}

TEST(CancelStates, RacingAFailingPeerEachRequestCompletesOnce) {
  constexpr size_t kRequests = 600;
  Record rec(kRequests);
  Pair p;
  p.start();
  ASSERT_TRUE(p.writer);
  p.gate->fail_after = 100;  // the first 100 completions are fine, then the peer "dies"
  std::vector<TransferId> ids;
  for (size_t i = 0; i < kRequests; ++i) {
    const uint64_t off = (i % kPages) * kPage;
    auto id = p.writer->submit_write({p.src_reg.handle, off, p.dst_reg.desc, off, kPage, 930}, rec.sink(i));
    ASSERT_TRUE(id.ok());
    ids.push_back(*id);
  }
  std::map<ErrorCode, size_t> answers;
  for (size_t i = kRequests; i-- > 0;) answers[p.writer->cancel(ids[i]).code()]++;
  ASSERT_TRUE(eventually([&] { return rec.finished.load() == kRequests; }, 30s)) << rec.finished.load();
  std::this_thread::sleep_for(50ms);
  for (size_t i = 0; i < kRequests; ++i) ASSERT_EQ(rec.calls[i].load(), 1) << "request " << i;
  std::lock_guard lock(rec.mu);
  size_t total = 0;
  for (const auto& [code, n] : rec.codes) {
    EXPECT_TRUE(code == ErrorCode::kOk || code == ErrorCode::kCancelled || code == ErrorCode::kPeerUnreachable ||
                code == ErrorCode::kDomainDown)
        << error_code_name(code);
    total += n;
  }
  EXPECT_EQ(total, kRequests);
  for (const auto& [code, n] : answers) {
    EXPECT_TRUE(code == ErrorCode::kOk || code == ErrorCode::kNotFound) << error_code_name(code);
  }
  // Imms at the target: never more than the requests that could have landed.
  EXPECT_LE(p.target->imms().count(930), kRequests);
}

}  // namespace
}  // namespace fabric_lib::testing

// How the worker hands a request's WRs to the domain (core/group_worker_post.cc), seen from a
// script in front of the writer's domain. A paged write's pages go as one page run
// (Domain::post_pages), its first page included. A scatter's WRs to several targets go as batches
// after its first WR, which goes alone and at once (GroupWorker::post_batch: one
// Domain::post_writes call, one watchdog bracket, a WR record each); targets that take turns
// among a few descriptors are grouped by descriptor and go as one run each (post_run: one call,
// one record) — and every promise of
// posting WR by WR still holds: a batch the provider takes only part of posts the rest later,
// exactly once; a WR the provider refuses fails the request once, the WRs before it land and none
// after it is posted; a path's in-flight limit holds inside a batch.
//
// Two engines over tcp on lo in this process, one domain per group: the writer's domain goes
// through the script (below), which logs each post_pages and post_writes call, answers kAgain or
// a refusal at a chosen WR, and can hold completions back; the target has four groups (four
// peers), and its imm counts and bytes are checked.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "engine/builder_testing.h"
#include "fabric_lib/fabric_lib.h"
#include "support/eventually.h"
#include "support/bounds.h"
#include "support/forwarding_domain.h"

namespace fabric_lib::testing {
namespace {

using namespace std::chrono_literals;

constexpr uint64_t kPage = 4096;
constexpr size_t kPeers = 4;
constexpr uint32_t kTargets = 16;

struct Script {
  std::mutex mu;
  std::vector<size_t> page_runs;       // the page count of each post_pages call
  std::vector<std::pair<int64_t, int64_t>> largest;  // each post_pages call's largest indices (-1: not given)
  std::vector<size_t> calls;           // the size of each post_writes call
  std::multiset<uint64_t> posted;      // remote address of each WR the provider took
  std::vector<bool> posted_in_call;    // per WR taken, in order: whether it came in a post_writes call
  bool in_call = false;
  int64_t again_at = -1;               // answer kAgain once when this many WRs were posted
  int64_t refuse_at = -1;              // refuse the WR posted after this many
  std::atomic<bool> hold{false};       // polls return nothing (completions held back)
  std::atomic<uint64_t> polls{0};      // poll calls so far: the worker's passes, counted

  size_t posted_count() {
    std::lock_guard lock(mu);
    return posted.size();
  }
};

class ScriptDomain final : public ForwardingDomain {
 public:
  ScriptDomain(std::unique_ptr<transport::Domain> inner, std::shared_ptr<Script> script)
      : ForwardingDomain(std::move(inner)), script_(std::move(script)) {}

  size_t post_pages(const transport::PageRunWr& run, transport::PostResult* last, Status* e) override {
    {
      std::lock_guard lock(script_->mu);
      script_->page_runs.push_back(run.count);
      script_->largest.emplace_back(run.largest_known ? int64_t{run.largest_src_page} : -1,
                                    run.largest_known ? int64_t{run.largest_dst_page} : -1);
    }
    return Domain::post_pages(run, last, e);  // through post_writes below
  }
  size_t post_writes(std::span<const transport::WriteWr> wrs, transport::PostResult* last, Status* e) override {
    {
      std::lock_guard lock(script_->mu);
      script_->calls.push_back(wrs.size());
      script_->in_call = true;
    }
    const size_t n = Domain::post_writes(wrs, last, e);  // WR by WR through post_write below
    std::lock_guard lock(script_->mu);
    script_->in_call = false;
    return n;
  }
  transport::PostResult post_write(const transport::WriteWr& wr, Status* e) override {
    std::lock_guard lock(script_->mu);
    const int64_t n = static_cast<int64_t>(script_->posted.size());
    if (n == script_->again_at) {
      script_->again_at = -1;
      return transport::PostResult::kAgain;
    }
    if (n == script_->refuse_at) {
      if (e) *e = Status(ErrorCode::kInvalidArgument, "scripted refusal");
      return transport::PostResult::kFailed;
    }
    const transport::PostResult r = ForwardingDomain::post_write(wr, e);
    if (r == transport::PostResult::kPosted) {
      script_->posted.insert(wr.remote_addr);
      script_->posted_in_call.push_back(script_->in_call);
    }
    return r;
  }
  size_t poll(std::vector<transport::Event>& out, size_t max) override {
    script_->polls.fetch_add(1);
    return script_->hold.load() ? 0 : ForwardingDomain::poll(out, max);
  }

 private:
  std::shared_ptr<Script> script_;
};

TransferEngineBuilder tcp_builder(size_t groups) {
  TransferEngineBuilder b;
  b.provider("tcp").interfaces({"lo"}).domains_per_group(1).groups(groups).stall_timeout(std::chrono::nanoseconds(0));
  return b;
}

// A writer whose domain runs the script, a target of kPeers groups with a zeroed region each.
struct Engines {
  std::shared_ptr<Script> script = std::make_shared<Script>();
  std::vector<uint8_t> src = std::vector<uint8_t>(kTargets * kPage);
  std::vector<std::vector<uint8_t>> dst = std::vector<std::vector<uint8_t>>(kPeers, std::vector<uint8_t>(kTargets * kPage, 0));
  std::unique_ptr<TransferEngine> target, writer;
  MrRegistration src_reg;
  std::vector<MrDesc> dst_descs;

  void start(size_t max_inflight = 0) {
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 131 + 7);
    auto t = tcp_builder(kPeers).build();
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    target = std::move(t).value();
    TransferEngineBuilder b = tcp_builder(1);
    if (max_inflight > 0) b.max_inflight_per_domain(max_inflight);
    std::shared_ptr<Script> s = script;
    BuilderAccess::set_domain_decorator(
        b, [s](std::unique_ptr<transport::Domain> inner) { return std::make_unique<ScriptDomain>(std::move(inner), s); });
    auto w = b.build();
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    writer = std::move(w).value();
    for (size_t g = 0; g < kPeers; ++g) {
      auto d = target->register_memory(dst[g].data(), dst[g].size(), Access::kRemoteWrite, MemoryKind::kHost, g);
      ASSERT_TRUE(d.ok()) << d.status().to_string();
      dst_descs.push_back(d->desc);
    }
    auto r = writer->register_memory(src.data(), src.size(), Access::kLocalOnly);
    ASSERT_TRUE(r.ok());
    src_reg = *r;
    // tcp answers EAGAIN while it connects to a peer: one write to each first, so the script's
    // log shows only the scatter.
    for (size_t g = 0; g < kPeers; ++g) {
      CompletionCounter c;
      ASSERT_TRUE(writer->submit_write({src_reg.handle, 0, dst_descs[g], 0, 1, 0}, Completion::counter(c)).ok());
      ASSERT_TRUE(c.wait_for(1, 10s));
      ASSERT_EQ(c.errors.load(), 0u);
      dst[g][0] = 0;
    }
    std::lock_guard lock(script->mu);
    script->page_runs.clear();
    script->calls.clear();
    script->posted.clear();
    script->posted_in_call.clear();
  }
  ~Engines() {
    if (writer) writer->stop();
    if (target) target->stop();
  }
  // Page i of the source to page i at peer peer_of(i), with `imm`. Each target names a descriptor
  // of its own (a decoded copy: equal, another identity), so no two WRs make a run (post_run) and
  // the worker batches them; with `shared`, the targets of one peer name one descriptor.
  ScatterRequest scatter(uint32_t imm, size_t (*peer_of)(uint32_t), bool shared = false) const {
    ScatterRequest s{src_reg.handle};
    for (uint32_t i = 0; i < kTargets; ++i) {
      const MrDesc& desc = dst_descs[peer_of(i)];
      s.targets.push_back({kPage, i * kPage, i * kPage, shared ? desc : MrDesc::from_bytes(desc.to_bytes()).value(), 0});
    }
    s.imm = imm;
    return s;
  }
  // Whether page i at its peer holds the source's page i (landed) or zeros (never posted).
  bool landed(uint32_t i, size_t peer) const {
    return std::equal(src.begin() + i * kPage, src.begin() + (i + 1) * kPage, dst[peer].begin() + i * kPage);
  }
  bool untouched(uint32_t i, size_t peer) const {
    return std::all_of(dst[peer].begin() + i * kPage, dst[peer].begin() + (i + 1) * kPage, [](uint8_t b) { return b == 0; });
  }
};

size_t in_turn(uint32_t i) { return i % kPeers; }
size_t one_peer(uint32_t) { return 0; }

// Submits and waits for the one completion; returns its status and how many completions came.
std::pair<Status, int> run(Engines& s, ScatterRequest request) {
  std::mutex mu;
  Status outcome;
  std::atomic<int> completions{0};
  Result<TransferId> id = s.writer->submit_scatter(std::move(request), Completion::callback([&](const Status& st) {
    std::lock_guard lock(mu);
    outcome = st;
    completions.fetch_add(1);
  }));
  if (!id.ok()) return {id.status(), 0};
  eventually([&] { return completions.load() > 0; });
  std::this_thread::sleep_for(bounds::kQuiet);  // a second completion would show by now
  std::lock_guard lock(mu);
  return {outcome, completions.load()};
}

TEST(PostingForms, APagedWritesPagesGoAsOnePageRunFirstPageIncluded) {
  Engines s;
  s.start();
  ASSERT_TRUE(s.writer);
  PagedWriteRequest paged{s.src_reg.handle, s.dst_descs[2], kPage};
  for (uint32_t i = 0; i < kTargets; ++i) {
    paged.src_pages.push_back(i);
    paged.dst_pages.push_back(i);
  }
  paged.src_stride = paged.dst_stride = kPage;
  paged.imm = 505;
  CompletionCounter c;
  ASSERT_TRUE(s.writer->submit_paged_writes(paged, Completion::counter(c)).ok());
  ASSERT_TRUE(c.wait_for(1, 10s));
  EXPECT_EQ(c.errors.load(), 0u);
  {
    std::lock_guard lock(s.script->mu);
    EXPECT_EQ(s.script->page_runs, std::vector<size_t>{kTargets}) << "the pages were not one run";
    // The engine hands the run the largest indices it checked the request with.
    const std::pair<int64_t, int64_t> largest{kTargets - 1, kTargets - 1};
    const std::vector<std::pair<int64_t, int64_t>> one_run{largest};
    EXPECT_EQ(s.script->largest, one_run);
    ASSERT_EQ(s.script->posted_in_call.size(), kTargets);
    for (uint32_t i = 0; i < kTargets; ++i) EXPECT_TRUE(s.script->posted_in_call[i]) << "page " << i << " went alone";
  }
  ASSERT_TRUE(eventually([&] { return s.target->imms().count(505) == kTargets; }));
  for (uint32_t i = 0; i < kTargets; ++i) EXPECT_TRUE(s.landed(i, 2)) << "page " << i;
}

TEST(PostingForms, AScattersWrsToSeveralPeersGoInOneCallAfterItsFirst) {
  Engines s;
  s.start();
  ASSERT_TRUE(s.writer);
  auto [status, completions] = run(s, s.scatter(501, in_turn));
  EXPECT_TRUE(status.ok()) << status.to_string();
  EXPECT_EQ(completions, 1);
  {
    std::lock_guard lock(s.script->mu);
    // The first WR alone and at once, the other 15 as one batch.
    EXPECT_EQ(s.script->calls, std::vector<size_t>{kTargets - 1}) << "the 15 WRs were not handed over as one batch";
    EXPECT_EQ(s.script->posted.size(), kTargets);
    ASSERT_EQ(s.script->posted_in_call.size(), kTargets);
    EXPECT_FALSE(s.script->posted_in_call[0]) << "the first WR waited for a batch";
  }
  ASSERT_TRUE(eventually([&] { return s.target->imms().count(501) == kTargets; }));
  for (uint32_t i = 0; i < kTargets; ++i) EXPECT_TRUE(s.landed(i, in_turn(i))) << "page " << i;
}

// Targets taking turns among the peers' descriptors (as MoE dispatch names its peers): the WRs are
// grouped by descriptor (group_by_target) and each descriptor's four go as one run — one
// post_writes call each, the request's first WR inside the first — where they went as a batch of
// WR records; every page lands once, with its imm.
TEST(PostingForms, TargetsTakingTurnsAmongDescriptorsGoAsOneRunEach) {
  Engines s;
  s.start();
  ASSERT_TRUE(s.writer);
  auto [status, completions] = run(s, s.scatter(506, in_turn, /*shared=*/true));
  EXPECT_TRUE(status.ok()) << status.to_string();
  EXPECT_EQ(completions, 1);
  {
    std::lock_guard lock(s.script->mu);
    EXPECT_EQ(s.script->calls, std::vector<size_t>(kPeers, kTargets / kPeers)) << "not one run per descriptor";
    EXPECT_EQ(s.script->posted.size(), kTargets);
    for (uint64_t addr : s.script->posted) EXPECT_EQ(s.script->posted.count(addr), 1u) << "a WR was posted twice";
  }
  // Each WR was posted once (above), so the imms cannot exceed kTargets: wait for them all.
  ASSERT_TRUE(eventually([&] { return s.target->imms().count(506) == kTargets; }));
  for (uint32_t i = 0; i < kTargets; ++i) EXPECT_TRUE(s.landed(i, in_turn(i))) << "page " << i;
}

TEST(PostingForms, APartlyTakenBatchPostsTheRestLaterExactlyOnce) {
  Engines s;
  s.start();
  ASSERT_TRUE(s.writer);
  s.script->again_at = 5;
  auto [status, completions] = run(s, s.scatter(502, in_turn));
  EXPECT_TRUE(status.ok()) << status.to_string();
  EXPECT_EQ(completions, 1);
  {
    std::lock_guard lock(s.script->mu);
    ASSERT_GE(s.script->calls.size(), 2u);
    EXPECT_EQ(s.script->calls[0], kTargets - 1);  // after the first WR, posted alone
    // The first call took 4 (5 WRs out), then each of the other 11 was offered in exactly one
    // later call.
    size_t offered = 0;
    for (size_t c : s.script->calls) offered += c;
    EXPECT_EQ(offered, (kTargets - 1) + (kTargets - 5));
    EXPECT_EQ(s.script->posted.size(), kTargets);
    for (uint64_t addr : s.script->posted) EXPECT_EQ(s.script->posted.count(addr), 1u) << "a WR was posted twice";
  }
  ASSERT_TRUE(eventually([&] { return s.target->imms().count(502) == kTargets; }));
  std::this_thread::sleep_for(bounds::kQuiet);
  EXPECT_EQ(s.target->imms().count(502), kTargets);
  for (uint32_t i = 0; i < kTargets; ++i) EXPECT_TRUE(s.landed(i, in_turn(i))) << "page " << i;
}

TEST(PostingForms, ARefusedWrInABatchFailsTheRequestOnceAndNothingAfterItIsPosted) {
  Engines s;
  s.start();
  ASSERT_TRUE(s.writer);
  constexpr uint32_t kRefused = 7;
  s.script->refuse_at = kRefused;
  auto [status, completions] = run(s, s.scatter(503, in_turn));
  EXPECT_EQ(status.code(), ErrorCode::kInvalidArgument) << status.to_string();
  EXPECT_NE(status.message().find("scripted refusal"), std::string::npos) << status.to_string();
  EXPECT_EQ(completions, 1);
  EXPECT_EQ(s.script->posted_count(), kRefused);
  // The WRs before the refused one land (the request ends only after they did); none after.
  ASSERT_TRUE(eventually([&] { return s.target->imms().count(503) == kRefused; }));
  std::this_thread::sleep_for(bounds::kQuiet);
  EXPECT_EQ(s.target->imms().count(503), kRefused);
  for (uint32_t i = 0; i < kTargets; ++i) {
    if (i < kRefused) {
      EXPECT_TRUE(s.landed(i, in_turn(i))) << "page " << i;
    } else {
      EXPECT_TRUE(s.untouched(i, in_turn(i))) << "page " << i;
    }
  }
}

TEST(PostingForms, APathsInFlightLimitHoldsInsideABatch) {
  Engines s;
  s.start(/*max_inflight=*/8);  // a path may hold 8 - 8/8 = 7 (GroupWorker::open_domains)
  ASSERT_TRUE(s.writer);
  s.script->hold = true;
  std::atomic<int> completions{0};
  Status outcome;
  std::mutex mu;
  Result<TransferId> id =
      s.writer->submit_scatter(s.scatter(504, one_peer), Completion::callback([&](const Status& st) {
        std::lock_guard lock(mu);
        outcome = st;
        completions.fetch_add(1);
      }));
  ASSERT_TRUE(id.ok()) << id.status().to_string();
  ASSERT_TRUE(eventually([&] { return s.script->posted_count() >= 7; }));
  // The worker keeps trying while nothing completes: let it make many passes (each polls the
  // domain once), not just wait a while, so the check below cannot pass on an idle worker.
  const uint64_t polls_then = s.script->polls.load();
  ASSERT_TRUE(eventually([&] { return s.script->polls.load() >= polls_then + 200; }))
      << "the worker stopped polling a domain with WRs in flight";
  EXPECT_EQ(s.script->posted_count(), 7u) << "a batch took the path past its limit";
  s.script->hold = false;
  ASSERT_TRUE(eventually([&] { return completions.load() == 1; }));
  std::this_thread::sleep_for(bounds::kQuiet);
  EXPECT_EQ(completions.load(), 1);
  {
    std::lock_guard lock(mu);
    EXPECT_TRUE(outcome.ok()) << outcome.to_string();
  }
  EXPECT_EQ(s.script->posted_count(), kTargets);
  ASSERT_TRUE(eventually([&] { return s.target->imms().count(504) == kTargets; }));
  for (uint32_t i = 0; i < kTargets; ++i) EXPECT_TRUE(s.landed(i, 0)) << "page " << i;
}

}  // namespace
}  // namespace fabric_lib::testing

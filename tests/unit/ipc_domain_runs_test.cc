// IpcDomain::post_writes: a paged write's run is one op, one gather copy, one imm record and one
// completion event counting its WRs. Checked with bytes and counts: every page lands at its place
// (pages in a shuffled order) before any imm of the run arrives, the target counts exactly one
// arrival and the initiator exactly one completion per WR; a run stops before its first refused
// WR with post_write's error; a run at the op limit or refused by the copy engine posts nothing;
// a run to a peer that exited or closed ends with PeerUnreachable for each posted WR. Host memory:
// in this process (memcpy), and in a child process (process_vm_writev with iovec batches).
// IpcDomain::post_pages, the same run given as its page list (PageRunWr): the same op, bytes and
// counts, the same refusals (a page list's range checks: ipc_domain_page_list_test.cc). A write's shards
// (WRs that continue each other, of unequal lengths): one op and one plain copy the same way. A
// WR's imm_count: its imm counted that many times at the target.
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>
#include <random>

#include "ipc_runs_support.h"

namespace fabric_lib::transport::ipc {
namespace {

using testing::count_kind;
using testing::count_of;
using testing::HostPages;
using testing::kPage;
using testing::PageList;
using testing::page_run;
using testing::pages_missing;
using testing::Pair;
using testing::pattern;
using testing::shuffled;
using testing::source_pages;
using testing::write_wr;

// A run of 300 shuffled pages, posted as WriteWrs (post_writes) or as its page list (post_pages):
// one op, every page lands before any of the run's imms, exactly one arrival and one completion
// per WR, in one imm record and one event.
// With largest_known the page list carries its largest indices, as the engine's runs do.
void expect_run_lands_as_one_op(bool page_list, bool largest_known = false) {
  // 64 KiB a poll: the run's copy takes 19 polls, and its imm must wait for the last.
  IpcOptions a = testing::test_options();
  a.host_copies.slice_bytes = a.host_copies.budget_bytes = 64 * 1024;
  Pair p(std::move(a), testing::test_options());
  ASSERT_TRUE(p.a && p.b);
  constexpr size_t kPages = 300;
  HostPages host(p, kPages, kPages);
  auto& [src, dst, smr, dmr] = host;
  ASSERT_TRUE(smr.ok() && dmr.ok());
  const std::vector<size_t> perm = shuffled(kPages, 15);
  PostResult last = PostResult::kFailed;
  Status error;
  if (page_list) {
    const PageList list(perm);
    PageRunWr run = list.run(src.data(), smr->desc, p.b_at_a, dmr->rkey, 77, 5);
    run.largest_known = largest_known;
    run.largest_src_page = run.largest_dst_page = kPages - 1;
    ASSERT_EQ(p.a->post_pages(run, &last, &error), kPages) << error.to_string();
  } else {
    const std::vector<WriteWr> run = page_run(src.data(), smr->desc, p.b_at_a, dmr->rkey, perm, 77, 5);
    ASSERT_EQ(p.a->post_writes(run, &last, &error), kPages) << error.to_string();
  }
  EXPECT_EQ(last, PostResult::kPosted);
  EXPECT_EQ(p.a->ops_in_flight(), 1u) << "a run is one op";
  size_t missing_at_imm = SIZE_MAX;
  ASSERT_TRUE(p.poll_until([&] {
    if (missing_at_imm == SIZE_MAX && count_of(p.eb, EventKind::kImm) > 0) missing_at_imm = pages_missing(dst.data(), perm, kPages);
    return count_of(p.eb, EventKind::kImm) >= kPages && count_of(p.ea, EventKind::kWriteDone) >= kPages;
  }));
  EXPECT_EQ(missing_at_imm, 0u) << "an imm of the run arrived before all of its pages";
  for (int i = 0; i < 100; ++i) p.a->poll(p.ea, 64), p.b->poll(p.eb, 64);
  EXPECT_EQ(count_of(p.eb, EventKind::kImm), kPages) << "one arrival per WR, no more";
  EXPECT_EQ(count_of(p.ea, EventKind::kWriteDone), kPages) << "one completion per WR, no more";
  EXPECT_EQ(count_kind(p.eb, EventKind::kImm), 1u) << "the run's imms in one record";
  EXPECT_EQ(count_kind(p.ea, EventKind::kWriteDone), 1u) << "the run's completions in one event";
  for (const Event& e : p.eb) EXPECT_EQ(e.imm, 77u);
  for (const Event& e : p.ea) {
    EXPECT_EQ(e.context, 5u);
    EXPECT_TRUE(e.status.ok()) << e.status.to_string();
  }
  EXPECT_EQ(pages_missing(dst.data(), perm, kPages), 0u);
  EXPECT_EQ(p.a->ops_in_flight(), 0u);
}

TEST(IpcDomainRuns, ARunIsOneOpOneImmRecordAndOneEventAndEveryPageLandsBeforeItsImm) {
  expect_run_lands_as_one_op(/*page_list=*/false);
}

TEST(IpcDomainRuns, APageListIsOneOpOneImmRecordAndOneEventAndEveryPageLandsBeforeItsImm) {
  expect_run_lands_as_one_op(/*page_list=*/true);
}

TEST(IpcDomainRuns, APageListWithItsLargestIndicesKnownIsTheSameOneOp) {
  expect_run_lands_as_one_op(/*page_list=*/true, /*largest_known=*/true);
}

// A write's shards on one domain (the engine keeps them there on a one-medium group): WRs of
// unequal lengths that continue each other on both sides are one op and one plain copy — one
// imm record and one event, each counting the WRs — and every byte lands before the imm. A WR
// after them that does not continue them starts a new op.
TEST(IpcDomainRuns, AWritesShardsAreOneOpOneImmRecordAndOneEventAndLandBeforeTheImm) {
  IpcOptions a = testing::test_options();
  a.host_copies.slice_bytes = a.host_copies.budget_bytes = 64 * 1024;  // the copy takes many polls
  Pair p(std::move(a), testing::test_options());
  ASSERT_TRUE(p.a && p.b);
  const std::vector<size_t> shard_pages = {17, 17, 17, 15};  // 66 pages, as shard_layout cuts them
  constexpr size_t kPages = 68;
  HostPages host(p, kPages, 2 * kPages);
  auto& [src, dst, smr, dmr] = host;
  ASSERT_TRUE(smr.ok() && dmr.ok());
  std::vector<WriteWr> wrs;
  for (size_t k = 0, page = 0; k < shard_pages.size(); page += shard_pages[k++]) {
    wrs.push_back(write_wr(src.data() + page * kPage, smr->desc, shard_pages[k] * kPage, p.b_at_a, page * kPage, dmr->rkey, 31u, 5));
  }
  // Page 0 again, to the second half of the target: not a continuation.
  wrs.push_back(write_wr(src.data(), smr->desc, kPage, p.b_at_a, kPages * kPage + kPage, dmr->rkey, 32u, 6));
  PostResult last = PostResult::kFailed;
  Status error;
  ASSERT_EQ(p.a->post_writes(wrs, &last, &error), wrs.size()) << error.to_string();
  EXPECT_EQ(last, PostResult::kPosted);
  EXPECT_EQ(p.a->ops_in_flight(), 2u) << "the four shards are one op, the fifth WR another";
  std::vector<size_t> identity(kPages - 2);
  std::iota(identity.begin(), identity.end(), size_t{0});
  size_t missing_at_imm = SIZE_MAX;
  auto imms_of = [&](uint32_t imm) {
    uint64_t n = 0;
    for (const Event& e : p.eb) n += e.kind == EventKind::kImm && e.imm == imm ? e.count : 0;
    return n;
  };
  ASSERT_TRUE(p.poll_until([&] {
    if (missing_at_imm == SIZE_MAX && imms_of(31) > 0) missing_at_imm = pages_missing(dst.data(), identity, identity.size());
    return imms_of(31) + imms_of(32) >= 5 && count_of(p.ea, EventKind::kWriteDone) >= 5;
  }));
  EXPECT_EQ(missing_at_imm, 0u) << "an imm of the shards arrived before all of their bytes";
  for (int i = 0; i < 100; ++i) p.a->poll(p.ea, 64), p.b->poll(p.eb, 64);
  EXPECT_EQ(imms_of(31), 4u) << "one arrival per shard WR";
  EXPECT_EQ(imms_of(32), 1u);
  EXPECT_EQ(count_kind(p.eb, EventKind::kImm), 2u) << "one record for the shards, one for the fifth WR";
  std::map<uint64_t, std::pair<uint64_t, uint64_t>> per_context;  // context -> (events, WRs)
  for (const Event& e : p.ea) {
    EXPECT_TRUE(e.status.ok()) << e.status.to_string();
    per_context[e.context].first += 1;
    per_context[e.context].second += e.count;
  }
  EXPECT_EQ(per_context, (std::map<uint64_t, std::pair<uint64_t, uint64_t>>{{5, {1, 4}}, {6, {1, 1}}}));
  EXPECT_EQ(pages_missing(dst.data(), identity, identity.size()), 0u);
  EXPECT_EQ(std::memcmp(dst.data() + kPages * kPage + kPage, src.data(), kPage), 0);
  // Nothing past the shards' last byte, nor around the fifth WR's page.
  const size_t past = identity.size() * kPage, fifth = kPages * kPage + kPage;
  EXPECT_EQ(std::count(dst.begin() + past, dst.begin() + fifth, 0), static_cast<ptrdiff_t>(fifth - past));
  EXPECT_EQ(std::count(dst.begin() + fifth + kPage, dst.end(), 0), static_cast<ptrdiff_t>(dst.size() - fifth - kPage));
  EXPECT_EQ(p.a->ops_in_flight(), 0u);
}

// WriteWr::imm_count (DomainInfo::takes_imm_count): a WR's imm arrives that many times — a single
// write standing for 4 shards, an imm-only WR, two shards that continue each other (one op: their
// counts add up), a plain WR (1) and one that says 0 (counted as 1) — while each WR still
// completes once at the initiator.
TEST(IpcDomainRuns, AWrsImmCountIsCountedThatManyTimesAtTheTargetAndItCompletesOnce) {
  Pair p;
  ASSERT_TRUE(p.a && p.b);
  EXPECT_TRUE(p.a->info().takes_imm_count);
  constexpr size_t kPages = 8;
  HostPages host(p, kPages, kPages);
  auto& [src, dst, smr, dmr] = host;
  ASSERT_TRUE(smr.ok() && dmr.ok());
  auto wr = [&](size_t page, size_t pages, uint32_t imm, uint64_t context, uint16_t imm_count) {
    WriteWr w = write_wr(pages ? src.data() + page * kPage : nullptr, pages ? smr->desc : nullptr, pages * kPage, p.b_at_a,
                         page * kPage, dmr->rkey, imm, context);
    w.imm_count = imm_count;
    return w;
  };
  const std::vector<WriteWr> wrs = {wr(0, 3, 41, 5, 4), wr(0, 0, 42, 6, 3), wr(3, 1, 43, 7, 2), wr(4, 2, 43, 7, 2),
                                    wr(6, 1, 44, 8, 1), wr(7, 1, 45, 9, 0)};
  PostResult last = PostResult::kFailed;
  Status error;
  ASSERT_EQ(p.a->post_writes(wrs, &last, &error), wrs.size()) << error.to_string();
  EXPECT_EQ(last, PostResult::kPosted);
  auto imms_of = [&](uint32_t imm) {
    uint64_t n = 0;
    for (const Event& e : p.eb) n += e.kind == EventKind::kImm && e.imm == imm ? e.count : 0;
    return n;
  };
  ASSERT_TRUE(p.poll_until([&] { return count_of(p.eb, EventKind::kImm) >= 13 && count_of(p.ea, EventKind::kWriteDone) >= 6; }));
  for (int i = 0; i < 100; ++i) p.a->poll(p.ea, 64), p.b->poll(p.eb, 64);
  EXPECT_EQ(imms_of(41), 4u);
  EXPECT_EQ(imms_of(42), 3u);
  EXPECT_EQ(imms_of(43), 4u) << "two WRs of one op, 2 each";
  EXPECT_EQ(imms_of(44), 1u);
  EXPECT_EQ(imms_of(45), 1u) << "an imm_count of 0 is counted as 1";
  std::map<uint64_t, uint64_t> per_context;
  for (const Event& e : p.ea) {
    EXPECT_TRUE(e.status.ok()) << e.status.to_string();
    per_context[e.context] += e.count;
  }
  EXPECT_EQ(per_context, (std::map<uint64_t, uint64_t>{{5, 1}, {6, 1}, {7, 2}, {8, 1}, {9, 1}}));
  EXPECT_EQ(std::memcmp(dst.data(), src.data(), kPages * kPage), 0);
}

// post_writes' WRs in order, whatever their form: a run, an imm-only WR, a single write, another
// run (its own context). Each WR completes once and each imm arrives once.
TEST(IpcDomainRuns, RunsImmOnlyAndSingleWritesPostInOrderAndCountOnce) {
  Pair p;
  constexpr size_t kPages = 8;
  HostPages host(p, kPages, kPages);
  auto& [src, dst, smr, dmr] = host;
  ASSERT_TRUE(smr.ok() && dmr.ok());
  std::vector<size_t> perm(kPages);
  std::iota(perm.begin(), perm.end(), size_t{0});
  std::vector<WriteWr> wrs;
  for (size_t k = 0; k < kPages; ++k) {
    const uint64_t context = k < 3 ? 1 : k == 3 ? 2 : k < 5 ? 3 : 4;  // run of 3, imm-only, single, run of 3
    wrs.push_back(write_wr(src.data() + k * kPage, smr->desc, kPage, p.b_at_a, k * kPage, dmr->rkey, 9u, context));
  }
  wrs.insert(wrs.begin() + 3, write_wr(nullptr, nullptr, 0, p.b_at_a, 0, dmr->rkey, 9u, 10));
  PostResult last = PostResult::kFailed;
  Status error;
  ASSERT_EQ(p.a->post_writes(wrs, &last, &error), wrs.size()) << error.to_string();
  EXPECT_EQ(last, PostResult::kPosted);
  ASSERT_TRUE(p.poll_until([&] {
    return count_of(p.eb, EventKind::kImm) >= wrs.size() && count_of(p.ea, EventKind::kWriteDone) >= wrs.size();
  }));
  for (int i = 0; i < 100; ++i) p.a->poll(p.ea, 64), p.b->poll(p.eb, 64);
  EXPECT_EQ(count_of(p.eb, EventKind::kImm), wrs.size());
  std::map<uint64_t, uint64_t> per_context;
  for (const Event& e : p.ea) {
    EXPECT_TRUE(e.status.ok()) << e.status.to_string();
    per_context[e.context] += e.count;
  }
  EXPECT_EQ(per_context, (std::map<uint64_t, uint64_t>{{1, 3}, {2, 1}, {3, 1}, {10, 1}, {4, 3}}));
  EXPECT_EQ(pages_missing(dst.data(), perm, kPages), 0u);
}

// WR j of a run is refused (its target or its source outside its region): the run's first j WRs
// are posted as one op and land, WR j is reported with the error post_write gives it, and
// nothing after it is posted.
TEST(IpcDomainRuns, ARunStopsBeforeItsFirstRefusedWriteWithPostWritesError) {
  struct Case {
    size_t bad;
    bool bad_source;
    ErrorCode code;
  };
  for (const Case c : {Case{6, false, ErrorCode::kOutOfRange}, Case{3, true, ErrorCode::kInvalidArgument},
                       Case{0, false, ErrorCode::kOutOfRange}}) {
    SCOPED_TRACE("refused WR " + std::to_string(c.bad));
    Pair p;
    constexpr size_t kPages = 10;
    HostPages host(p, kPages, kPages);
    auto& [src, dst, smr, dmr] = host;
    ASSERT_TRUE(smr.ok() && dmr.ok());
    const std::vector<size_t> perm = shuffled(kPages, 3);
    std::vector<WriteWr> run = page_run(src.data(), smr->desc, p.b_at_a, dmr->rkey, perm, 9, 42);
    if (c.bad_source) {
      run[c.bad].src = src.data() + src.size() - 100;  // its last 4 KiB run past the source region
    } else {
      run[c.bad].remote_addr = dst.size() - 100;
    }
    Status alone;
    ASSERT_EQ(p.a->post_write(run[c.bad], &alone), PostResult::kFailed);
    PostResult last = PostResult::kPosted;
    Status error;
    ASSERT_EQ(p.a->post_writes(run, &last, &error), c.bad);
    EXPECT_EQ(last, PostResult::kFailed);
    EXPECT_EQ(error.code(), c.code) << error.to_string();
    EXPECT_EQ(error.message(), alone.message()) << "the error post_write gives";
    EXPECT_EQ(p.a->ops_in_flight(), c.bad > 0 ? 1u : 0u) << "the posted part is one op";
    if (c.bad > 0) {
      ASSERT_TRUE(p.poll_until([&] { return count_of(p.ea, EventKind::kWriteDone) >= c.bad && count_of(p.eb, EventKind::kImm) >= c.bad; }));
    }
    for (int i = 0; i < 100; ++i) p.a->poll(p.ea, 64), p.b->poll(p.eb, 64);
    EXPECT_EQ(count_of(p.ea, EventKind::kWriteDone), c.bad) << "each posted WR completes once";
    EXPECT_EQ(count_of(p.eb, EventKind::kImm), c.bad);
    for (const Event& e : p.ea) EXPECT_TRUE(e.status.ok()) << e.status.to_string();
    EXPECT_EQ(pages_missing(dst.data(), perm, c.bad), 0u) << "the posted WRs landed";
    for (size_t k = c.bad; k < kPages; ++k) {
      const uint8_t* at = dst.data() + perm[k] * kPage;
      EXPECT_EQ(std::count(at, at + kPage, 0), static_cast<long>(kPage)) << "WR " << k << " was not posted, yet landed";
    }
  }
}

// At the op limit a run posts nothing and says kAgain; once ops finish it posts as one op (so a
// run of 8 fits where 8 single writes would not).
TEST(IpcDomainRuns, ARunOrPageListAtTheOpLimitPostsNothingAndSaysAgain) {
  Pair p(8192, /*max_inflight=*/1);
  ASSERT_TRUE(p.a && p.b);
  constexpr size_t kPages = 8;
  HostPages host(p, kPages + 1, kPages + 1);
  auto& [src, dst, smr, dmr] = host;
  ASSERT_TRUE(smr.ok() && dmr.ok());
  Status error;
  ASSERT_EQ(p.a->post_write(write_wr(src.data() + kPages * kPage, smr->desc, kPage, p.b_at_a, kPages * kPage, dmr->rkey, 3u, 1), &error),
            PostResult::kPosted);
  std::vector<size_t> perm(kPages);
  std::iota(perm.begin(), perm.end(), size_t{0});
  const std::vector<WriteWr> run = page_run(src.data(), smr->desc, p.b_at_a, dmr->rkey, perm, 3, 7);
  PostResult last = PostResult::kPosted;
  ASSERT_EQ(p.a->post_writes(run, &last, &error), 0u);
  EXPECT_EQ(last, PostResult::kAgain);
  last = PostResult::kPosted;  // the same run as a page list
  EXPECT_EQ(p.a->post_pages(PageList(perm).run(src.data(), smr->desc, p.b_at_a, dmr->rkey, 3, 7), &last, &error), 0u);
  EXPECT_EQ(last, PostResult::kAgain);
  EXPECT_EQ(p.a->ops_in_flight(), 1u);
  ASSERT_TRUE(p.poll_until([&] { return p.a->ops_in_flight() == 0; }));
  EXPECT_EQ(pages_missing(dst.data(), perm, kPages), kPages) << "nothing of the refused run was posted";
  ASSERT_EQ(p.a->post_writes(run, &last, &error), kPages);
  EXPECT_EQ(last, PostResult::kPosted);
  ASSERT_TRUE(p.poll_until([&] { return count_of(p.eb, EventKind::kImm) >= kPages + 1 && count_of(p.ea, EventKind::kWriteDone) >= kPages + 1; }));
  for (int i = 0; i < 50; ++i) p.a->poll(p.ea, 64), p.b->poll(p.eb, 64);
  EXPECT_EQ(count_of(p.eb, EventKind::kImm), kPages + 1);
  EXPECT_EQ(count_of(p.ea, EventKind::kWriteDone), kPages + 1);
  EXPECT_EQ(pages_missing(dst.data(), perm, kPages), 0u);
}

// A copy engine that cannot take a run now (kAgain) leaves all of it unposted; post_writes
// reports the runs before it as posted.
TEST(IpcDomainRuns, ARunTheCopyEngineCannotTakeNowPostsNothing) {
  IpcOptions a = testing::test_options();
  a.host_copies.max_jobs = 1;
  Pair p(std::move(a), testing::test_options());
  ASSERT_TRUE(p.a && p.b);
  constexpr size_t kPages = 6;
  HostPages host(p, kPages, kPages);
  auto& [src, dst, smr, dmr] = host;
  ASSERT_TRUE(smr.ok() && dmr.ok());
  const std::vector<size_t> perm = shuffled(kPages, 8);
  std::vector<WriteWr> wrs = page_run(src.data(), smr->desc, p.b_at_a, dmr->rkey, perm, 4, 1);
  for (size_t k = 3; k < kPages; ++k) wrs[k].context = 2;  // two runs: one copy job each
  PostResult last = PostResult::kPosted;
  Status error;
  ASSERT_EQ(p.a->post_writes(wrs, &last, &error), 3u);
  EXPECT_EQ(last, PostResult::kAgain);
  EXPECT_EQ(p.a->ops_in_flight(), 1u);
  ASSERT_TRUE(p.poll_until([&] { return p.a->ops_in_flight() == 0; }));
  EXPECT_EQ(pages_missing(dst.data(), perm, 3), 0u);
  for (size_t k = 3; k < kPages; ++k) {
    const uint8_t* at = dst.data() + perm[k] * kPage;
    EXPECT_EQ(std::count(at, at + kPage, 0), static_cast<long>(kPage)) << "WR " << k << " of the refused run landed";
  }
  ASSERT_EQ(p.a->post_writes(std::span<const WriteWr>(wrs).subspan(3), &last, &error), 3u);
  ASSERT_TRUE(p.poll_until([&] { return count_of(p.eb, EventKind::kImm) >= kPages && count_of(p.ea, EventKind::kWriteDone) >= kPages; }));
  EXPECT_EQ(pages_missing(dst.data(), perm, kPages), 0u);
}

// More equal imms queued than one record may carry (two runs of 40000 WRs with one imm): they
// go in several records, and every arrival is counted once.
TEST(IpcDomainRuns, EqualImmsPastOneRecordsLimitAreSplitAcrossRecords) {
  Pair p;
  ASSERT_TRUE(p.a && p.b);
  constexpr size_t kRun = 40000;
  std::vector<uint8_t> src(kRun, 1), dst(kRun, 0);
  auto smr = p.a->register_memory(src.data(), src.size(), Access::kLocalOnly, MemoryKind::kHost);
  auto dmr = p.b->register_memory(dst.data(), dst.size(), Access::kRemoteWrite, MemoryKind::kHost);
  ASSERT_TRUE(smr.ok() && dmr.ok());
  std::vector<WriteWr> wrs;
  for (size_t k = 0; k < 2 * kRun; ++k) {  // 1-byte writes: 80000 arrivals of imm 6
    wrs.push_back(write_wr(src.data() + k % kRun, smr->desc, 1, p.b_at_a, k % kRun, dmr->rkey, 6u, 1 + k / kRun));
  }
  PostResult last = PostResult::kFailed;
  Status error;
  ASSERT_EQ(p.a->post_writes(wrs, &last, &error), wrs.size()) << error.to_string();
  EXPECT_EQ(p.a->ops_in_flight(), 2u);
  ASSERT_TRUE(p.poll_until([&] { return count_of(p.eb, EventKind::kImm) >= wrs.size() && count_of(p.ea, EventKind::kWriteDone) >= wrs.size(); }));
  for (int i = 0; i < 50; ++i) p.a->poll(p.ea, 64), p.b->poll(p.eb, 64);
  EXPECT_EQ(count_of(p.eb, EventKind::kImm), wrs.size());
  EXPECT_EQ(count_of(p.ea, EventKind::kWriteDone), wrs.size());
  EXPECT_GE(count_kind(p.eb, EventKind::kImm), 2u);
  for (const Event& e : p.eb) EXPECT_LE(e.count, kMaxImmRecordCount);
  EXPECT_EQ(std::count(dst.begin(), dst.end(), 1), static_cast<long>(kRun));
}

// A run to a peer that closed its domain: the posted run ends with PeerUnreachable, its event
// counting every WR.
TEST(IpcDomainRuns, ARunToAPeerThatClosedItsDomainEndsWithPeerUnreachable) {
  Pair p;
  constexpr size_t kPages = 40;
  HostPages host(p, kPages, kPages);
  auto& [src, dst, smr, dmr] = host;
  ASSERT_TRUE(smr.ok() && dmr.ok());
  const std::vector<WriteWr> run = page_run(src.data(), smr->desc, p.b_at_a, dmr->rkey, shuffled(kPages, 1), 2, 9);
  PostResult last = PostResult::kFailed;
  Status error;
  ASSERT_EQ(p.a->post_writes(run, &last, &error), kPages);
  p.b.reset();  // closes before the run's imms go out
  ASSERT_TRUE(testing::poll_until({p.a.get()}, {&p.ea}, [&] { return count_of(p.ea, EventKind::kWriteDone) >= kPages; }));
  // Posted after the failure is known: WR by WR (the unusual path), each ending the same way.
  ASSERT_EQ(p.a->post_writes(run, &last, &error), kPages);
  ASSERT_TRUE(testing::poll_until({p.a.get()}, {&p.ea}, [&] { return count_of(p.ea, EventKind::kWriteDone) >= 2 * kPages; }));
  for (int i = 0; i < 50; ++i) p.a->poll(p.ea, 64);
  EXPECT_EQ(count_of(p.ea, EventKind::kWriteDone), 2 * kPages);
  for (const Event& e : p.ea) EXPECT_EQ(e.status.code(), ErrorCode::kPeerUnreachable) << e.status.to_string();
  EXPECT_EQ(p.ea.front().count, kPages) << "the posted run fails as one";
  EXPECT_EQ(p.a->ops_in_flight(), 0u);
}

// A target domain in a child process: its host memory is shared with the parent (MAP_SHARED
// before the fork, so the parent can check the bytes too) and written by the parent's domain
// with process_vm_writev. The child polls until it has seen `expected` imm arrivals (or 20 s),
// checks `intact` at the first one, and reports what it saw.
class ChildTarget {
 public:
  struct Report {
    uint64_t arrivals = 0;
    uint64_t events = 0;
    uint64_t intact_at_first_imm = 0;  // 1: `intact` held when the first imm arrived
  };
  ChildTarget(size_t bytes, uint64_t expected, std::function<bool(const uint8_t*)> intact) : bytes_(bytes) {
    memory = static_cast<uint8_t*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
    if (memory == MAP_FAILED || pipe(up_) != 0 || pipe(down_) != 0) return;
    pid = fork();
    if (pid == 0) {
      // Only the parent's ends: a parent that dies then closes the pipe and the child ends too.
      close(up_[0]);
      close(down_[1]);
      _exit(run_child(expected, intact));
    }
    close(up_[1]);  // a child that dies then ends the parent's reads
    close(down_[0]);
    up_[1] = down_[0] = -1;
    uint32_t len = 0;
    if (pid < 0 || read(up_[0], &len, 4) != 4 || len > 256) return;
    address.resize(len);
    if (read(up_[0], address.data(), len) != static_cast<ssize_t>(len) || read(up_[0], &rkey, 8) != 8) return;
    ready = true;
  }
  ~ChildTarget() {
    if (pid > 0) kill_now();
    for (int fd : {up_[0], up_[1], down_[0], down_[1]}) close(fd);
    if (memory != MAP_FAILED) munmap(memory, bytes_);
  }
  // Waits for the child's report, lets it exit, and reaps it.
  Report finish() {
    Report r;
    if (read(up_[0], &r, sizeof(r)) != static_cast<ssize_t>(sizeof(r))) r.arrivals = UINT64_MAX;
    const char done = 1;
    EXPECT_EQ(write(down_[1], &done, 1), 1);
    int status = 0;
    EXPECT_EQ(waitpid(pid, &status, 0), pid);
    pid = -1;
    return r;
  }
  void kill_now() {
    ::kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    pid = -1;
  }

  uint8_t* memory = static_cast<uint8_t*>(MAP_FAILED);
  std::vector<uint8_t> address;
  uint64_t rkey = 0;
  pid_t pid = -1;
  bool ready = false;

 private:
  int run_child(uint64_t expected, const std::function<bool(const uint8_t*)>& intact) {
    auto d = IpcDomain::open(testing::test_options());
    if (!d.ok()) return 10;
    auto mr = (*d)->register_memory(memory, bytes_, Access::kRemoteWrite, MemoryKind::kHost);
    if (!mr.ok()) return 11;
    const std::vector<uint8_t>& a = (*d)->address();
    const uint32_t len = static_cast<uint32_t>(a.size());
    if (write(up_[1], &len, 4) != 4 || write(up_[1], a.data(), len) != static_cast<ssize_t>(len) || write(up_[1], &mr->rkey, 8) != 8) {
      return 12;
    }
    Report r;
    std::vector<Event> events;
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (r.arrivals < expected && std::chrono::steady_clock::now() < end) {
      events.clear();
      (*d)->poll(events, 64);
      for (const Event& e : events) {
        if (e.kind != EventKind::kImm) continue;
        if (r.events++ == 0) r.intact_at_first_imm = intact(memory);
        r.arrivals += e.count;
      }
    }
    if (write(up_[1], &r, sizeof(r)) != static_cast<ssize_t>(sizeof(r))) return 13;
    char done = 0;
    return read(down_[0], &done, 1) == 1 ? 0 : 14;  // alive until the parent is finished
  }

  size_t bytes_;
  int up_[2] = {-1, -1};
  int down_[2] = {-1, -1};
};

// 2000 pages into another process: one gather, written with process_vm_writev in batches of at
// most 1024 iovecs (one slice takes all of it here, so the batch boundary falls inside a call to
// the engine), one imm record, one completion event.
TEST(IpcDomainRuns, ARunOf2000PagesLandsInAnotherProcessAcrossIovecBatches) {
  constexpr size_t kPages = 2000;
  const std::vector<size_t> perm = shuffled(kPages, 2000);
  ChildTarget child(kPages * kPage, kPages, [&](const uint8_t* memory) { return pages_missing(memory, perm, kPages) == 0; });
  ASSERT_TRUE(child.ready);
  IpcOptions o = testing::test_options();
  o.host_copies.slice_bytes = o.host_copies.budget_bytes = 64ull << 20;
  auto a = testing::open_domain(std::move(o));
  ASSERT_TRUE(a);
  std::vector<uint8_t> src = source_pages(kPages);
  auto smr = a->register_memory(src.data(), src.size(), Access::kLocalOnly, MemoryKind::kHost);
  Result<PeerHandle> peer = a->add_peer(child.address);
  ASSERT_TRUE(smr.ok() && peer.ok());
  const std::vector<WriteWr> run = page_run(src.data(), smr->desc, *peer, child.rkey, perm, 31, 3);
  PostResult last = PostResult::kFailed;
  Status error;
  ASSERT_EQ(a->post_writes(run, &last, &error), kPages) << error.to_string();
  std::vector<Event> events;
  ASSERT_TRUE(testing::poll_until({a.get()}, {&events}, [&] { return count_of(events, EventKind::kWriteDone) >= kPages; }));
  const ChildTarget::Report r = child.finish();
  EXPECT_EQ(r.arrivals, kPages) << "the target counts one arrival per WR";
  EXPECT_EQ(r.events, 1u) << "one imm record for the run";
  EXPECT_EQ(r.intact_at_first_imm, 1u) << "the imm arrived before every page was in place";
  for (int i = 0; i < 20; ++i) a->poll(events, 64);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].count, kPages);
  EXPECT_TRUE(events[0].status.ok()) << events[0].status.to_string();
  EXPECT_EQ(pages_missing(child.memory, perm, kPages), 0u);
}

// A run to a peer whose process has exited: the copy fails (ESRCH) and the run ends with one
// PeerUnreachable event counting all its WRs; runs posted afterwards end the same way.
TEST(IpcDomainRuns, ARunToAPeerThatExitedEndsWithPeerUnreachable) {
  constexpr size_t kPages = 64;
  ChildTarget child(kPages * kPage, UINT64_MAX, [](const uint8_t*) { return true; });
  ASSERT_TRUE(child.ready);
  auto a = testing::open_domain();
  ASSERT_TRUE(a);
  std::vector<uint8_t> src = source_pages(kPages);
  auto smr = a->register_memory(src.data(), src.size(), Access::kLocalOnly, MemoryKind::kHost);
  Result<PeerHandle> peer = a->add_peer(child.address);
  ASSERT_TRUE(smr.ok() && peer.ok());
  const std::vector<WriteWr> run = page_run(src.data(), smr->desc, *peer, child.rkey, shuffled(kPages, 4), 1, 8);
  PostResult last = PostResult::kFailed;
  Status error;
  ASSERT_EQ(a->post_writes(run, &last, &error), kPages) << error.to_string();
  child.kill_now();  // before a's first poll starts the copy
  std::vector<Event> events;
  ASSERT_TRUE(testing::poll_until({a.get()}, {&events}, [&] { return count_of(events, EventKind::kWriteDone) >= kPages; }));
  ASSERT_EQ(a->post_writes(run, &last, &error), kPages);
  ASSERT_TRUE(testing::poll_until({a.get()}, {&events}, [&] { return count_of(events, EventKind::kWriteDone) >= 2 * kPages; }));
  for (int i = 0; i < 20; ++i) a->poll(events, 64);
  EXPECT_EQ(count_of(events, EventKind::kWriteDone), 2 * kPages);
  for (const Event& e : events) EXPECT_EQ(e.status.code(), ErrorCode::kPeerUnreachable) << e.status.to_string();
  EXPECT_EQ(events.front().count, kPages) << "the run posted before the exit fails as one";
  EXPECT_EQ(a->ops_in_flight(), 0u);
}

}  // namespace
}  // namespace fabric_lib::transport::ipc

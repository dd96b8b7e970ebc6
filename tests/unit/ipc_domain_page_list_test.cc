// IpcDomain::post_pages' checks of a page list (PageRunWr): a page outside the source or target
// region ends the run before it with post_write's error for that WR (the pages before it posted
// and landed), with or without the run's largest indices given (PageRunWr::largest_known); a run
// of a longer list, whose given largest indices lie past the regions while its own pages fit, is
// posted whole; an index whose offset passes 2^64 is refused. Host memory, two domains in this
// process. (The page list's op, imm record and event: ipc_domain_runs_test.cc.)
#include <numeric>
#include <vector>

#include "ipc_runs_support.h"

namespace fabric_lib::transport::ipc {
namespace {

using testing::count_of;
using testing::HostPages;
using testing::kPage;
using testing::PageList;
using testing::pages_missing;
using testing::Pair;
using testing::shuffled;

// A page whose target (or source) lies outside its region: the pages before it are posted (and
// land), it is refused with post_write's error for the same WR, and the ones after it are not
// posted. (post_pages checks a run by its largest indices first, then page by page: both sides.)
// With largest_known the run carries its true largest indices (the bad page's among them).
void expect_list_stops_before_bad_page(bool bad_source, bool largest_known = false) {
  Pair p;
  ASSERT_TRUE(p.a && p.b);
  constexpr size_t kPages = 10, kBad = 6;
  HostPages host(p, kPages, kPages);
  auto& [src, dst, smr, dmr] = host;
  ASSERT_TRUE(smr.ok() && dmr.ok());
  std::vector<size_t> perm(kPages);
  std::iota(perm.begin(), perm.end(), size_t{0});
  PageList list(perm);
  if (bad_source) list.src[kBad] = kPages;  // one page past the source region's end
  else list.dst[kBad] = kPages;             // one page past the target region's end
  PageRunWr run = list.run(src.data(), smr->desc, p.b_at_a, dmr->rkey, 4, 2);
  run.largest_known = largest_known;
  run.largest_src_page = bad_source ? kPages : kPages - 1;
  run.largest_dst_page = bad_source ? kPages - 1 : kPages;
  Status expected;
  ASSERT_EQ(p.a->post_write(run.write(kBad), &expected), PostResult::kFailed);
  PostResult last = PostResult::kPosted;
  Status error;
  EXPECT_EQ(p.a->post_pages(run, &last, &error), kBad);
  EXPECT_EQ(last, PostResult::kFailed);
  EXPECT_EQ(error.code(), expected.code());
  EXPECT_EQ(error.message(), expected.message());
  ASSERT_TRUE(p.poll_until([&] { return count_of(p.eb, EventKind::kImm) >= kBad && count_of(p.ea, EventKind::kWriteDone) >= kBad; }));
  for (int i = 0; i < 50; ++i) p.a->poll(p.ea, 64), p.b->poll(p.eb, 64);
  EXPECT_EQ(count_of(p.eb, EventKind::kImm), kBad);
  EXPECT_EQ(count_of(p.ea, EventKind::kWriteDone), kBad);
  EXPECT_EQ(pages_missing(dst.data(), perm, kBad), 0u);
  EXPECT_EQ(pages_missing(dst.data(), std::vector<size_t>(perm.begin(), perm.end()), kPages), kPages - kBad);
}

TEST(IpcDomainRuns, APageListStopsBeforeItsFirstPageOutsideTheTarget) { expect_list_stops_before_bad_page(false); }
TEST(IpcDomainRuns, APageListStopsBeforeItsFirstPageOutsideTheSource) { expect_list_stops_before_bad_page(true); }
TEST(IpcDomainRuns, APageListWithItsLargestIndicesKnownStopsBeforeItsFirstBadPage) {
  expect_list_stops_before_bad_page(false, /*largest_known=*/true);
  expect_list_stops_before_bad_page(true, /*largest_known=*/true);
}

// A run that is part of a longer list carries that list's largest indices, which may lie past
// the regions while every page of the run fits: the whole run is posted (checked page by page)
// and lands.
TEST(IpcDomainRuns, ARunOfALongerListWhoseLargestIndexLiesPastTheRegionIsPostedWhole) {
  Pair p;
  constexpr size_t kPages = 10;
  HostPages host(p, kPages, kPages);
  auto& [src, dst, smr, dmr] = host;
  ASSERT_TRUE(smr.ok() && dmr.ok());
  const std::vector<size_t> perm = shuffled(kPages, 3);
  const PageList list(perm);
  PageRunWr run = list.run(src.data(), smr->desc, p.b_at_a, dmr->rkey, 4, 2);
  run.largest_known = true;
  run.largest_src_page = 1000;
  run.largest_dst_page = 2000;
  PostResult last = PostResult::kFailed;
  Status error;
  ASSERT_EQ(p.a->post_pages(run, &last, &error), kPages) << error.to_string();
  EXPECT_EQ(last, PostResult::kPosted);
  ASSERT_TRUE(p.poll_until([&] { return count_of(p.eb, EventKind::kImm) >= kPages && count_of(p.ea, EventKind::kWriteDone) >= kPages; }));
  EXPECT_EQ(pages_missing(dst.data(), perm, kPages), 0u);
}

// An index times its stride past 2^64: refused (a 64-bit WriteWr would wrap into the region).
TEST(IpcDomainRuns, APageListWhoseOffsetPassesTwoToTheSixtyFourIsRefused) {
  Pair p;
  HostPages host(p, 4, 4);
  auto& [src, dst, smr, dmr] = host;
  ASSERT_TRUE(smr.ok() && dmr.ok());
  PageList list(std::vector<size_t>{0, 1, 2, 3});
  list.dst = {0, 1, 2, 2};
  PageRunWr run = list.run(src.data(), smr->desc, p.b_at_a, dmr->rkey, 4, 2);
  run.dst_stride = (uint64_t{1} << 63);  // page 2: 2 * 2^63 = 2^64, which wraps to 0 in 64 bits
  PostResult last = PostResult::kPosted;
  Status error;
  EXPECT_EQ(p.a->post_pages(run, &last, &error), 1u);  // page 0 at 0 fits; page 1 at 2^63 does not
  EXPECT_EQ(last, PostResult::kFailed);
  EXPECT_EQ(error.code(), ErrorCode::kOutOfRange) << error.to_string();
  list.dst = {2, 0, 0, 0};
  run = list.run(src.data(), smr->desc, p.b_at_a, dmr->rkey, 4, 2);
  run.dst_stride = (uint64_t{1} << 63);
  error = Status();
  EXPECT_EQ(p.a->post_pages(run, &last, &error), 0u) << "2 * 2^63 wraps to offset 0: must not be written";
  EXPECT_EQ(last, PostResult::kFailed);
  EXPECT_EQ(error.code(), ErrorCode::kOutOfRange) << error.to_string();
}

}  // namespace
}  // namespace fabric_lib::transport::ipc

// Domain::post_writes, the run form of post_write: the default posts WR by WR and stops at the
// first one not posted, reporting how many were and why the next was not; a decorator's own
// post_write sees every WR of a run. Domain::post_pages, a paged write's run as its page list:
// the default hands the WRs it stands for to post_writes, in order, with their addresses.
#include <gtest/gtest.h>

#include <vector>

#include "support/forwarding_domain.h"

namespace fabric_lib::transport {
namespace {

// Accepts WRs until `accept` of them are held, then answers `then` (kAgain or kFailed).
class CountingDomain final : public testing::ForwardingDomain {
 public:
  CountingDomain(size_t accept, PostResult then) : ForwardingDomain(nullptr), accept_(accept), then_(then) {}
  PostResult post_write(const WriteWr& wr, Status* error) override {
    if (seen.size() == accept_) {
      if (then_ == PostResult::kFailed) *error = invalid_argument("refused WR " + std::to_string(wr.context));
      return then_;
    }
    seen.push_back(wr.context);
    writes.push_back(wr);
    return PostResult::kPosted;
  }
  std::vector<uint64_t> seen;
  std::vector<WriteWr> writes;

 private:
  size_t accept_;
  PostResult then_;
};

std::vector<WriteWr> run_of(size_t n) {
  std::vector<WriteWr> wrs(n);
  for (size_t i = 0; i < n; ++i) wrs[i].context = 100 + i;
  return wrs;
}

TEST(DomainPostWrites, PostsEveryWrInOrderWhenAllAreAccepted) {
  CountingDomain d(10, PostResult::kAgain);
  std::vector<WriteWr> wrs = run_of(6);
  PostResult last = PostResult::kFailed;
  Status error;
  EXPECT_EQ(d.post_writes(wrs, &last, &error), 6u);
  EXPECT_EQ(last, PostResult::kPosted);
  EXPECT_EQ(d.seen, (std::vector<uint64_t>{100, 101, 102, 103, 104, 105}));
}

TEST(DomainPostWrites, StopsAtBackPressureAndSaysSo) {
  CountingDomain d(3, PostResult::kAgain);
  std::vector<WriteWr> wrs = run_of(6);
  PostResult last = PostResult::kPosted;
  Status error;
  EXPECT_EQ(d.post_writes(wrs, &last, &error), 3u);
  EXPECT_EQ(last, PostResult::kAgain);
  EXPECT_TRUE(error.ok());
  EXPECT_EQ(d.seen.size(), 3u);
}

TEST(DomainPostWrites, StopsAtARefusedWrWithItsError) {
  CountingDomain d(2, PostResult::kFailed);
  std::vector<WriteWr> wrs = run_of(5);
  PostResult last = PostResult::kPosted;
  Status error;
  EXPECT_EQ(d.post_writes(wrs, &last, &error), 2u);
  EXPECT_EQ(last, PostResult::kFailed);
  EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(error.message().find("refused WR 102"), std::string::npos) << error.message();
}

TEST(DomainPostWrites, AnEmptyRunPostsNothing) {
  CountingDomain d(1, PostResult::kFailed);
  PostResult last = PostResult::kFailed;
  Status error;
  EXPECT_EQ(d.post_writes({}, &last, &error), 0u);
  EXPECT_EQ(last, PostResult::kPosted);
  EXPECT_TRUE(d.seen.empty());
}

// A page run of 150 pages (more than the default's batch of 64): WR i is page i of the lists.
PageRunWr page_run(const std::vector<uint32_t>& src_pages, const std::vector<uint32_t>& dst_pages) {
  static uint8_t base[1];
  PageRunWr run;
  run.src = base;
  run.src_desc = base;
  run.peer = 9;
  run.remote_addr = 1 << 20;
  run.rkey = 77;
  run.page_length = 4096;
  run.src_stride = 8192;
  run.dst_stride = 12288;
  run.src_pages = src_pages.data();
  run.dst_pages = dst_pages.data();
  run.count = src_pages.size();
  run.has_imm = true;
  run.imm = 5;
  run.context = 42;
  return run;
}

TEST(DomainPostPages, TheDefaultPostsEveryPageAsItsWriteInOrder) {
  std::vector<uint32_t> src_pages, dst_pages;
  for (uint32_t i = 0; i < 150; ++i) {
    src_pages.push_back((i * 37) % 150);
    dst_pages.push_back(149 - i);
  }
  const PageRunWr run = page_run(src_pages, dst_pages);
  CountingDomain d(1000, PostResult::kAgain);
  PostResult last = PostResult::kFailed;
  Status error;
  ASSERT_EQ(d.post_pages(run, &last, &error), 150u);
  EXPECT_EQ(last, PostResult::kPosted);
  ASSERT_EQ(d.writes.size(), 150u);
  for (size_t i = 0; i < 150; ++i) {
    const WriteWr& w = d.writes[i];
    EXPECT_EQ(w.src, run.src + uint64_t{src_pages[i]} * 8192) << i;
    EXPECT_EQ(w.remote_addr, (1u << 20) + uint64_t{dst_pages[i]} * 12288) << i;
    EXPECT_EQ(w.length, 4096u);
    EXPECT_EQ(w.src_desc, run.src_desc);
    EXPECT_EQ(w.peer, 9u);
    EXPECT_EQ(w.rkey, 77u);
    EXPECT_TRUE(w.has_imm);
    EXPECT_EQ(w.imm, 5u);
    EXPECT_EQ(w.context, 42u);
  }
}

TEST(DomainPostPages, TheDefaultStopsAtBackPressureOrARefusalPastABatch) {
  std::vector<uint32_t> pages(150);
  for (uint32_t i = 0; i < 150; ++i) pages[i] = i;
  const PageRunWr run = page_run(pages, pages);
  for (PostResult then : {PostResult::kAgain, PostResult::kFailed}) {
    CountingDomain d(70, then);  // batches of 4, 8, 16, 32 (60 WRs), then the one of 64 stops after 10
    PostResult last = PostResult::kPosted;
    Status error;
    EXPECT_EQ(d.post_pages(run, &last, &error), 70u);
    EXPECT_EQ(last, then);
    EXPECT_EQ(d.writes.size(), 70u);
    EXPECT_EQ(error.ok(), then == PostResult::kAgain) << error.to_string();
  }
}

// Records the size of every run post_pages hands to post_writes.
class RunSizeDomain final : public testing::ForwardingDomain {
 public:
  explicit RunSizeDomain(size_t accept) : ForwardingDomain(nullptr), accept_(accept) {}
  size_t post_writes(std::span<const WriteWr> wrs, PostResult* last, Status* error) override {
    offered.push_back(wrs.size());
    return Domain::post_writes(wrs, last, error);
  }
  PostResult post_write(const WriteWr&, Status*) override {
    if (posted == accept_) return PostResult::kAgain;
    ++posted;
    return PostResult::kPosted;
  }
  std::vector<size_t> offered;
  size_t posted = 0;

 private:
  size_t accept_;
};

// A full provider takes one WR per call or none (shm in a paged 4 KiB stream): the default must
// not build 64 WriteWrs to post one — that was a tenth of the worker's time there.
TEST(DomainPostPages, TheFirstBatchIsSmallAndTheBatchesDouble) {
  std::vector<uint32_t> pages(150);
  for (uint32_t i = 0; i < 150; ++i) pages[i] = i;
  const PageRunWr run = page_run(pages, pages);
  PostResult last = PostResult::kFailed;
  Status error;
  RunSizeDomain roomy(1000);
  EXPECT_EQ(roomy.post_pages(run, &last, &error), 150u);
  EXPECT_EQ(last, PostResult::kPosted);
  EXPECT_EQ(roomy.offered, (std::vector<size_t>{4, 8, 16, 32, 64, 26}));

  RunSizeDomain full(1);
  EXPECT_EQ(full.post_pages(run, &last, &error), 1u);
  EXPECT_EQ(last, PostResult::kAgain);
  EXPECT_EQ(full.offered, (std::vector<size_t>{4}));
}

}  // namespace
}  // namespace fabric_lib::transport

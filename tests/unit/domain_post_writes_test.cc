// Domain::post_writes, the run form of post_write: the default posts WR by WR and stops at the
// first one not posted, reporting how many were and why the next was not; a decorator's own
// post_write sees every WR of a run.
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
    return PostResult::kPosted;
  }
  std::vector<uint64_t> seen;

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

}  // namespace
}  // namespace fabric_lib::transport

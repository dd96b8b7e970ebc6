// Paged writes on the same-host IPC backend, whose domains share one medium
// (DomainInfo::one_medium): with the default route a request's pages stay on one domain and
// consecutive requests rotate over the domains; an explicit shard count is honoured. Checked with
// the engine's per-domain WR counts, the bytes at the target and its imm counts. Two engines in
// this process, four domains each, host memory.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "fabric_lib/fabric_lib.h"
#include "support/bounds.h"

namespace fabric_lib {
namespace {

constexpr size_t kDomains = 4;
constexpr uint32_t kPages = 64;
constexpr uint64_t kPage = 4096;

class IpcPagedRouteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto b = TransferEngineBuilder().provider("ipc").domains_per_group(kDomains);
    Result<std::unique_ptr<TransferEngine>> s = b.build(), r = b.build();
    ASSERT_TRUE(s.ok() && r.ok());
    sender_ = std::move(s).value();
    receiver_ = std::move(r).value();
    src_.resize(kDomains * kPages * kPage);
    for (size_t i = 0; i < src_.size(); ++i) src_[i] = static_cast<uint8_t>(i * 13 + 5);
    dst_.assign(src_.size(), 0);
    Result<MrRegistration> sm = sender_->register_memory(src_.data(), src_.size(), Access::kLocalOnly);
    Result<MrRegistration> dm = receiver_->register_memory(dst_.data(), dst_.size(), Access::kRemoteWrite);
    ASSERT_TRUE(sm.ok() && dm.ok());
    src_mr_ = *sm;
    dst_mr_ = *dm;
  }
  void TearDown() override {
    if (sender_) sender_->stop();
    if (receiver_) receiver_->stop();
  }

  // Request k: pages [k * kPages, (k + 1) * kPages) of the source to the same pages, reversed.
  PagedWriteRequest request(uint32_t k, Route route) const {
    PagedWriteRequest w;
    w.src = src_mr_.handle;
    w.dst = dst_mr_.desc;
    w.page_length = w.src_stride = w.dst_stride = kPage;
    for (uint32_t i = 0; i < kPages; ++i) {
      w.src_pages.push_back(k * kPages + i);
      w.dst_pages.push_back(k * kPages + kPages - 1 - i);
    }
    w.imm = 40 + k;
    w.route = route;
    return w;
  }
  // Runs request k and returns how many WRs each domain posted for it.
  std::vector<uint64_t> posted_by(uint32_t k, Route route) {
    const EngineStats before = sender_->stats();
    CompletionCounter sent, arrived;
    EXPECT_TRUE(receiver_->imms().expect(40 + k, kPages, Completion::counter(arrived)).ok());
    EXPECT_TRUE(sender_->submit_paged_writes(request(k, route), Completion::counter(sent)).ok());
    EXPECT_TRUE(sent.wait_for(1, testing::bounds::kRequests));
    EXPECT_TRUE(arrived.wait_for(1, testing::bounds::kRequests)) << "the target did not count " << kPages << " imms";
    EXPECT_EQ(sent.errors.load(), 0u);
    const EngineStats after = sender_->stats();
    std::vector<uint64_t> delta(kDomains, 0);
    for (size_t d = 0; d < kDomains && d < after.wrs_posted_by_domain.size(); ++d) {
      delta[d] = after.wrs_posted_by_domain[d] - (d < before.wrs_posted_by_domain.size() ? before.wrs_posted_by_domain[d] : 0);
    }
    for (uint32_t i = 0; i < kPages; ++i) {
      const uint64_t from = (uint64_t{k} * kPages + i) * kPage, to = (uint64_t{k} * kPages + kPages - 1 - i) * kPage;
      EXPECT_EQ(std::memcmp(dst_.data() + to, src_.data() + from, kPage), 0) << "request " << k << " page " << i;
    }
    return delta;
  }

  std::unique_ptr<TransferEngine> sender_, receiver_;
  std::vector<uint8_t> src_, dst_;
  MrRegistration src_mr_, dst_mr_;
};

TEST_F(IpcPagedRouteTest, ADefaultRoutedPagedWriteStaysOnOneDomainAndRequestsRotate) {
  std::vector<uint64_t> total(kDomains, 0);
  for (uint32_t k = 0; k < kDomains; ++k) {
    const std::vector<uint64_t> delta = posted_by(k, RoundRobin{});
    size_t used = 0;
    for (size_t d = 0; d < kDomains; ++d) {
      if (delta[d] == 0) continue;
      ++used;
      EXPECT_EQ(delta[d], kPages) << "request " << k << ", domain " << d;
      total[d] += delta[d];
    }
    EXPECT_EQ(used, 1u) << "request " << k << " was split over " << used << " domains";
  }
  for (size_t d = 0; d < kDomains; ++d) EXPECT_EQ(total[d], kPages) << "requests rotate: domain " << d;
}

TEST_F(IpcPagedRouteTest, AnExplicitShardCountIsHonoured) {
  const std::vector<uint64_t> delta = posted_by(0, RoundRobin{kDomains});
  for (size_t d = 0; d < kDomains; ++d) EXPECT_EQ(delta[d], kPages / kDomains) << "domain " << d;
}

}  // namespace
}  // namespace fabric_lib

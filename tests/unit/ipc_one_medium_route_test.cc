// Requests on the same-host IPC backend, whose domains share one medium
// (DomainInfo::one_medium): with the default route a paged write's pages, a single write's shards
// and each destination of a by-bytes scatter stay on one domain — domain 0 for every request, or
// with FABRIC_LIB_ONE_MEDIUM_SPREAD=1 consecutive requests rotating over the domains; the shards
// are still the route's, so the target counts imm_count_of() imms — a single write's shards go as
// ONE WR announcing their count (DomainInfo::takes_imm_count); an explicit shard count is
// honoured. Checked with the engine's per-domain WR counts,
// the bytes at the target and its imm counts. Two engines in this process, four domains each,
// host memory.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "fabric_lib/fabric_lib.h"
#include "support/bounds.h"

namespace fabric_lib {
namespace {

constexpr size_t kDomains = 4;
constexpr uint32_t kPages = 64;
constexpr uint64_t kPage = 4096;

class IpcOneMediumRouteTest : public ::testing::Test {
 protected:
  void SetUp() override { build_engines(); }
  // `spread`: FABRIC_LIB_ONE_MEDIUM_SPREAD while the engines are built (null: unset).
  void build_engines(const char* spread = nullptr) {
    if (spread) setenv("FABRIC_LIB_ONE_MEDIUM_SPREAD", spread, 1);
    auto b = TransferEngineBuilder().provider("ipc").domains_per_group(kDomains);
    Result<std::unique_ptr<TransferEngine>> s = b.build(), r = b.build();
    unsetenv("FABRIC_LIB_ONE_MEDIUM_SPREAD");
    ASSERT_TRUE(s.ok() && r.ok());
    sender_ = std::move(s).value();
    receiver_ = std::move(r).value();
    src_.resize(std::max<uint64_t>(kDomains * kPages * kPage, kDomains * kWriteBytes));
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
  // Submits one request with `submit(done)`, waits for it and for `imms` arrivals of `imm` at the
  // target, and returns how many WRs each domain posted for it.
  template <typename Submit>
  std::vector<uint64_t> posted_by(uint32_t imm, uint64_t imms, Submit&& submit) {
    const EngineStats before = sender_->stats();
    CompletionCounter sent, arrived;
    EXPECT_TRUE(receiver_->imms().expect(imm, imms, Completion::counter(arrived)).ok());
    EXPECT_TRUE(submit(Completion::counter(sent)).ok());
    EXPECT_TRUE(sent.wait_for(1, testing::bounds::kRequests));
    const bool counted = arrived.wait_for(1, testing::bounds::kRequests);
    EXPECT_TRUE(counted) << "the target did not count " << imms << " imms";
    if (!counted) {  // end the expectation now: its sink must not outlive `arrived`
      receiver_->imms().cancel_expectation(imm);
      arrived.wait_for(1, testing::bounds::kRequests);
    }
    EXPECT_EQ(sent.errors.load(), 0u);
    const EngineStats after = sender_->stats();
    std::vector<uint64_t> delta(kDomains, 0);
    for (size_t d = 0; d < kDomains && d < after.wrs_posted_by_domain.size(); ++d) {
      delta[d] = after.wrs_posted_by_domain[d] - (d < before.wrs_posted_by_domain.size() ? before.wrs_posted_by_domain[d] : 0);
    }
    return delta;
  }
  // Paged request k; checks its pages at the target.
  std::vector<uint64_t> posted_by(uint32_t k, Route route) {
    std::vector<uint64_t> delta = posted_by(40 + k, kPages, [&](Completion done) {
      return sender_->submit_paged_writes(request(k, route), std::move(done));
    });
    for (uint32_t i = 0; i < kPages; ++i) {
      const uint64_t from = (uint64_t{k} * kPages + i) * kPage, to = (uint64_t{k} * kPages + kPages - 1 - i) * kPage;
      EXPECT_EQ(std::memcmp(dst_.data() + to, src_.data() + from, kPage), 0) << "request " << k << " page " << i;
    }
    return delta;
  }
  // Single write k: kWriteBytes from source byte k * kWriteBytes to target byte (k + 1) * kWriteBytes
  // (mod the region); checks its bytes at the target.
  static constexpr uint64_t kWriteBytes = 66 * kPage;  // 4 shards: 3 of 17 pages and one of 15
  std::vector<uint64_t> single_write_posted_by(uint32_t k, Route route) {
    WriteRequest w;
    w.src = src_mr_.handle;
    w.src_offset = k * kWriteBytes;
    w.dst = dst_mr_.desc;
    w.dst_offset = ((k + 1) % kDomains) * kWriteBytes;
    w.length = kWriteBytes;
    w.imm = 60 + k;
    w.route = route;
    const uint64_t imms = imm_count_of(w, kDomains);
    std::vector<uint64_t> delta = posted_by(60 + k, imms, [&](Completion done) { return sender_->submit_write(w, std::move(done)); });
    EXPECT_EQ(std::memcmp(dst_.data() + w.dst_offset, src_.data() + w.src_offset, kWriteBytes), 0) << "write " << k;
    return delta;
  }

  std::unique_ptr<TransferEngine> sender_, receiver_;
  std::vector<uint8_t> src_, dst_;
  MrRegistration src_mr_, dst_mr_;
};

// Runs requests 0..kDomains-1 with `run(k)` (per-domain WR counts of request k): each must post
// all of its `wrs` WRs from one domain, and the requests together every domain once (rotation).
template <typename Run>
void expect_one_domain_each_and_rotation(uint64_t wrs, Run&& run) {
  std::vector<uint64_t> total(kDomains, 0);
  for (uint32_t k = 0; k < kDomains; ++k) {
    const std::vector<uint64_t> delta = run(k);
    size_t used = 0;
    for (size_t d = 0; d < kDomains; ++d) {
      if (delta[d] == 0) continue;
      ++used;
      EXPECT_EQ(delta[d], wrs) << "request " << k << ", domain " << d << ": all of its WRs";
      total[d] += delta[d];
    }
    EXPECT_EQ(used, 1u) << "request " << k << " was split over " << used << " domains";
  }
  for (size_t d = 0; d < kDomains; ++d) EXPECT_EQ(total[d], wrs) << "requests rotate: domain " << d;
}

// With FABRIC_LIB_ONE_MEDIUM_SPREAD=1 (the placement before 2026-12-07): requests rotate.
class IpcOneMediumSpreadTest : public IpcOneMediumRouteTest {
 protected:
  void SetUp() override { build_engines("1"); }
};

TEST_F(IpcOneMediumSpreadTest, ADefaultRoutedPagedWriteStaysOnOneDomainAndRequestsRotate) {
  expect_one_domain_each_and_rotation(kPages, [&](uint32_t k) { return posted_by(k, RoundRobin{}); });
}

TEST_F(IpcOneMediumRouteTest, AnExplicitShardCountIsHonoured) {
  const std::vector<uint64_t> delta = posted_by(0, RoundRobin{kDomains});
  for (size_t d = 0; d < kDomains; ++d) EXPECT_EQ(delta[d], kPages / kDomains) << "domain " << d;
}

// The shard layout, and so the imm count the target expects, is the route's (4 shards); the write
// goes as one WR announcing those 4 imms, posted by one domain, and consecutive writes rotate.
TEST_F(IpcOneMediumSpreadTest, ADefaultRoutedSingleWriteKeepsItsShardsOnOneDomainAndItsImmCount) {
  ASSERT_EQ(imm_count_of_write(kWriteBytes, RoundRobin{}, kDomains), kDomains) << "the write must have a shard per domain";
  expect_one_domain_each_and_rotation(1, [&](uint32_t k) { return single_write_posted_by(k, RoundRobin{}); });
}

// Writes of 1 to 4 shards (by length): each is one WR from domain 0, and the target counts
// exactly imm_count_of_write() arrivals of its imm — no fewer (the expectation fires) and no more
// (it consumed them: nothing is left counted; the arrivals travel as one record).
TEST_F(IpcOneMediumRouteTest, ADefaultRoutedWriteIsOneWrAnnouncingItsShardsImmCount) {
  const uint64_t lengths[] = {4 * kPage, 2 * kMinShardBytes, 3 * kMinShardBytes, kWriteBytes};
  for (uint32_t i = 0; i < 4; ++i) {
    const uint64_t shards = imm_count_of_write(lengths[i], RoundRobin{}, kDomains);
    ASSERT_EQ(shards, i + 1) << "length " << lengths[i];
    WriteRequest w;
    w.src = src_mr_.handle;
    w.src_offset = kPage;  // unaligned to the shards on both sides
    w.dst = dst_mr_.desc;
    w.dst_offset = 3 * kPage;
    w.length = lengths[i];
    w.imm = 80 + i;
    std::fill(dst_.begin(), dst_.end(), 0);
    EXPECT_EQ(posted_by(80 + i, shards, [&](Completion done) { return sender_->submit_write(w, std::move(done)); }),
              (std::vector<uint64_t>{1, 0, 0, 0}))
        << "length " << lengths[i];
    EXPECT_EQ(receiver_->imms().count(80 + i), 0u) << "arrivals beyond " << shards << ", length " << lengths[i];
    EXPECT_EQ(std::memcmp(dst_.data() + w.dst_offset, src_.data() + w.src_offset, w.length), 0) << "length " << lengths[i];
    EXPECT_EQ(dst_[w.dst_offset - 1], 0) << "nothing before the write";
    EXPECT_EQ(dst_[w.dst_offset + w.length], 0) << "nothing after the write";
  }
}

TEST_F(IpcOneMediumRouteTest, AnExplicitShardCountSplitsASingleWriteOverTheDomains) {
  const std::vector<uint64_t> delta = single_write_posted_by(0, RoundRobin{kDomains});
  for (size_t d = 0; d < kDomains; ++d) EXPECT_EQ(delta[d], 1u) << "domain " << d;
}

// A by-bytes scatter to two destinations: each destination's 4 shards on one domain, the two
// destinations on different domains; the target counts imm_count_of() per destination.
TEST_F(IpcOneMediumRouteTest, AByBytesScatterKeepsEachDestinationsShardsOnOneDomain) {
  ScatterRequest s;
  s.src = src_mr_.handle;
  s.sharding = ScatterSharding::kByBytes;
  s.imm = 70;
  for (uint64_t t = 0; t < 2; ++t) {
    ScatterTarget target;
    target.length = kWriteBytes;
    target.src_offset = t * kWriteBytes;
    target.dst_offset = (2 + t) * kWriteBytes;
    target.dst = dst_mr_.desc;
    s.targets.push_back(target);
  }
  const uint64_t imms = imm_count_of(s, 0, kDomains) + imm_count_of(s, 1, kDomains);
  ASSERT_EQ(imms, 2 * kDomains);
  const std::vector<uint64_t> delta = posted_by(70, imms, [&](Completion done) { return sender_->submit_scatter(s, std::move(done)); });
  std::vector<uint64_t> used;
  for (size_t d = 0; d < kDomains; ++d) {
    if (delta[d] > 0) used.push_back(delta[d]);
  }
  EXPECT_EQ(used, (std::vector<uint64_t>{kDomains, kDomains})) << "each destination's shards on one domain of its own";
  for (uint64_t t = 0; t < 2; ++t) {
    EXPECT_EQ(std::memcmp(dst_.data() + (2 + t) * kWriteBytes, src_.data() + t * kWriteBytes, kWriteBytes), 0) << "target " << t;
  }
}

// By default every default-routed request, paged or single, goes from domain 0 (all of its
// WRs; a single write's shards as one WR), with the same imm counts; an explicit shard count
// still splits. (The fixture
// builds without the variable; FABRIC_LIB_ONE_MEDIUM_SPREAD=0 says the same explicitly.)
TEST_F(IpcOneMediumRouteTest, DefaultRoutedRequestsAllGoFromDomainZero) {
  for (uint32_t k = 0; k < kDomains; ++k) {
    EXPECT_EQ(posted_by(k, RoundRobin{}), (std::vector<uint64_t>{kPages, 0, 0, 0})) << "paged request " << k;
    EXPECT_EQ(single_write_posted_by(k, RoundRobin{}), (std::vector<uint64_t>{1, 0, 0, 0})) << "write " << k;
  }
  const std::vector<uint64_t> split = posted_by(0, RoundRobin{kDomains});
  for (size_t d = 0; d < kDomains; ++d) EXPECT_EQ(split[d], kPages / kDomains) << "domain " << d;
}

class IpcOneMediumNoSpreadTest : public IpcOneMediumRouteTest {
 protected:
  void SetUp() override { build_engines("0"); }
};

TEST_F(IpcOneMediumNoSpreadTest, ZeroKeepsEveryRequestOnDomainZero) {
  for (uint32_t k = 0; k < 2; ++k) {
    EXPECT_EQ(posted_by(k, RoundRobin{}), (std::vector<uint64_t>{kPages, 0, 0, 0})) << "paged request " << k;
  }
}

TEST(IpcOneMediumSpreadSetting, AValueOtherThanZeroOrOneIsRefused) {
  for (const char* bad : {"2", "yes", "-1"}) {
    setenv("FABRIC_LIB_ONE_MEDIUM_SPREAD", bad, 1);
    Result<std::unique_ptr<TransferEngine>> e = TransferEngineBuilder().provider("ipc").build();
    unsetenv("FABRIC_LIB_ONE_MEDIUM_SPREAD");
    ASSERT_FALSE(e.ok()) << bad;
    EXPECT_EQ(e.status().code(), ErrorCode::kInvalidArgument) << bad;
    EXPECT_NE(e.status().message().find("FABRIC_LIB_ONE_MEDIUM_SPREAD"), std::string::npos) << e.status().message();
  }
}

}  // namespace
}  // namespace fabric_lib

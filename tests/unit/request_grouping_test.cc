// The grouping of a request's planned WRs (core/request.h): by domain (group_by_domain), by
// target for a scatter (group_by_target), and which requests need grouping at all.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/peer_group_data.h"
#include "core/request.h"
#include "core/shard_planner.h"
#include "fabric_lib/requests.h"
#include "planner_test_support.h"

namespace fabric_lib {
namespace {

using testing_planner::MiB;
using planner::WrPlan;

// group_by_domain(): WRs stably sorted by domain and domain_begin[d]..[d+1] is exactly domain d's
// range (empty for unused domains).
TEST(RequestGrouping, GroupByDomain) {
  std::mt19937 rng(11);
  for (size_t n = 1; n <= 16; ++n) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{5}, size_t{64}, size_t{500}}) {
      detail::Request req;
      for (size_t i = 0; i < count; ++i) {
        // Skew towards few domains so some stay empty.
        const uint32_t d = static_cast<uint32_t>(rng() % std::max<size_t>(1, n / 2 + 1)) % n;
        req.wrs.push_back({d, 0, /*src_offset = original index*/ i, 0, 1});
      }
      const std::vector<WrPlan> before = req.wrs;
      detail::group_by_domain(req, n);
      ASSERT_EQ(req.wrs.size(), count);
      ASSERT_EQ(req.domain_begin.size(), n + 1);
      EXPECT_EQ(req.domain_begin[0], 0u);
      EXPECT_EQ(req.domain_begin[n], count);
      for (size_t d = 0; d < n; ++d) {
        ASSERT_LE(req.domain_begin[d], req.domain_begin[d + 1]);
        size_t expected = 0;
        for (const WrPlan& w : before) expected += w.domain == d;
        EXPECT_EQ(req.domain_begin[d + 1] - req.domain_begin[d], expected) << "domain " << d;
        uint64_t last_index = 0;
        for (uint32_t i = req.domain_begin[d]; i < req.domain_begin[d + 1]; ++i) {
          EXPECT_EQ(req.wrs[i].domain, d);
          if (i > req.domain_begin[d]) {
            EXPECT_GT(req.wrs[i].src_offset, last_index) << "not stable";
          }
          last_index = req.wrs[i].src_offset;
        }
      }
      // Nothing lost or duplicated.
      std::vector<uint64_t> ids;
      for (const WrPlan& w : req.wrs) ids.push_back(w.src_offset);
      std::sort(ids.begin(), ids.end());
      for (size_t i = 0; i < count; ++i) EXPECT_EQ(ids[i], i);
    }
  }
}

// group_by_target(): a scatter's WRs stably ordered by target when some target's WRs were apart
// (each target's own WRs keep their order, nothing lost), then by domain without undoing it;
// left exactly as they were when each target's WRs are already together, when there are too few
// WRs, when the targets are too many for the WRs (a few members of a large PeerGroup), and —
// without a group, where each entry of the request's targets is some WR's own descriptor — when
// there are as many entries as WRs (none can repeat). Inputs as the engine makes them: without a
// group every entry has a WR; with one, WRs name any members.
TEST(RequestGrouping, GroupByTarget) {
  std::mt19937 rng(12);
  int sorted_cases = 0, kept_cases = 0;  // the draws reach both outcomes, with and without a group
  int sorted_grouped = 0;
  for (int seed = 0; seed < 40; ++seed) {
    for (bool grouped : {false, true}) {
      for (size_t count : {size_t{0}, size_t{2}, size_t{3}, size_t{8}, size_t{64}, size_t{500}}) {
        // Without a group, 1..count entries; with one, 1..(2 * count + 100) members, so some
        // draws pass the "too many targets" bound (2 * count + 64).
        const size_t targets = grouped ? 1 + rng() % (2 * count + 100) : 1 + (count == 0 ? 0 : rng() % count);
        detail::Request req;
        if (grouped) req.group = std::make_shared<const PeerGroup::Data>();
        for (size_t i = 0; i < count; ++i) {
          // Targets taking turns (as MoE dispatch names its peers), or drawn at random, or held
          // for a while; domains by index.
          const uint32_t t = seed % 3 == 0 ? static_cast<uint32_t>((i + rng() % 2) % targets)
                             : seed % 3 == 1 ? static_cast<uint32_t>(rng() % targets)
                                             : static_cast<uint32_t>((i / 5) % targets);
          req.wrs.push_back({static_cast<uint32_t>(i % 4), t, i, 0, 1});
        }
        if (!grouped && count > 0) {  // every entry is some WR's descriptor: a missing one takes a WR from a repeated one
          std::vector<uint32_t> uses(targets, 0);
          for (const WrPlan& w : req.wrs) ++uses[w.target];
          size_t from = 0;
          for (uint32_t t = 0; t < targets; ++t) {
            if (uses[t] > 0) continue;
            while (uses[req.wrs[from].target] < 2) ++from;  // targets <= count: one exists
            --uses[req.wrs[from].target];
            req.wrs[from].target = t;
            ++uses[t];
          }
        }
        const std::vector<WrPlan> before = req.wrs;
        detail::group_by_target(req, targets);
        SCOPED_TRACE((grouped ? "group, " : "no group, ") + std::to_string(targets) + " targets, " +
                     std::to_string(count) + " WRs, seed " + std::to_string(seed));
        ASSERT_EQ(req.wrs.size(), count);
        bool apart = false;  // some target's WRs not one after another before
        std::vector<bool> ended(targets, false);
        for (size_t i = 0; i < count && !apart; ++i) {
          if (i > 0 && before[i - 1].target != before[i].target) ended[before[i - 1].target] = true;
          apart = ended[before[i].target];
        }
        const bool skipped = count < 3 || targets < 2 || targets > 2 * count + 64 || (!grouped && targets >= count);
        if (skipped || !apart) {
          for (size_t i = 0; i < count; ++i) ASSERT_EQ(req.wrs[i].src_offset, before[i].src_offset) << "moved, WR " << i;
          kept_cases += count >= 3;
          continue;
        }
        ++sorted_cases;
        sorted_grouped += grouped;
        for (size_t i = 1; i < count; ++i) {
          ASSERT_LE(req.wrs[i - 1].target, req.wrs[i].target) << "WR " << i;
          if (req.wrs[i - 1].target == req.wrs[i].target) {
            EXPECT_LT(req.wrs[i - 1].src_offset, req.wrs[i].src_offset) << "not stable, WR " << i;
          }
        }
        std::vector<uint64_t> ids;
        for (const WrPlan& w : req.wrs) {
          EXPECT_EQ(w.domain, w.src_offset % 4) << "a WR's fields travel together";
          EXPECT_EQ(w.target, before[w.src_offset].target);
          ids.push_back(w.src_offset);
        }
        std::sort(ids.begin(), ids.end());
        for (size_t i = 0; i < count; ++i) ASSERT_EQ(ids[i], i);
        // Grouped by domain afterwards, each domain's WRs stay by target.
        detail::group_by_domain(req, 4);
        for (uint32_t d = 0; d < 4; ++d) {
          for (uint32_t i = req.domain_begin[d] + 1; i < req.domain_begin[d + 1]; ++i) {
            EXPECT_LE(req.wrs[i - 1].target, req.wrs[i].target) << "domain " << d << " WR " << i;
          }
        }
      }
    }
  }
  EXPECT_GT(sorted_cases - sorted_grouped, 20);
  EXPECT_GT(sorted_grouped, 20);
  EXPECT_GT(kept_cases, 20);
  // The bounds themselves, with targets apart: 6 WRs of a group among 76 members (2 * 6 + 64) are
  // sorted, among 77 are not; without a group, 3 entries for 4 WRs are sorted, 4 for 4 are not
  // (they cannot repeat: the engine never makes such a request).
  auto sorted_after = [](size_t members, std::vector<uint32_t> order, bool grouped) {
    detail::Request r;
    if (grouped) r.group = std::make_shared<const PeerGroup::Data>();
    for (uint32_t i = 0; i < order.size(); ++i) r.wrs.push_back({0, order[i], i, 0, 1});
    detail::group_by_target(r, members);
    return std::is_sorted(r.wrs.begin(), r.wrs.end(), [](const WrPlan& a, const WrPlan& b) { return a.target < b.target; });
  };
  EXPECT_TRUE(sorted_after(76, {0, 75, 0, 75, 0, 75}, true));
  EXPECT_FALSE(sorted_after(77, {0, 76, 0, 76, 0, 76}, true));
  EXPECT_TRUE(sorted_after(3, {0, 2, 1, 0}, false));
  EXPECT_FALSE(sorted_after(4, {0, 2, 1, 0}, false));
}

// A recycled request keeps its vectors: one WR on each domain in turn (EngineCore::enqueue does
// not group a single WR, but grouping one stays correct), after a plan whose counts differ, gives
// that domain exactly [0, 1) and the others none.
TEST(RequestGrouping, OneWrOnARecycledRequest) {
  detail::Request req;
  for (uint32_t i = 0; i < 9; ++i) req.wrs.push_back({i % 4, 0, i, 0, 1});
  detail::group_by_domain(req, 4);
  for (uint32_t d = 0; d < 4; ++d) {
    req.wrs.assign({WrPlan{d, 0, 0, 0, 1}});
    detail::group_by_domain(req, 4);
    ASSERT_EQ(req.domain_begin.size(), 5u);
    for (uint32_t k = 0; k <= 4; ++k) EXPECT_EQ(req.domain_begin[k], k <= d ? 0u : 1u) << "domain " << d << " k " << k;
  }
}

// needs_grouping(): only a write whose WRs lie on more than one domain (or that has none) is
// grouped; one WR, a pinned write and a one-medium group's shards (all on one domain) go as one
// stream on wrs[0].domain, and so do paged writes and sends (they have their own streams).
TEST(RequestGrouping, OnlyWritesOverSeveralDomainsAreGrouped) {
  detail::Request req;
  EXPECT_TRUE(req.needs_grouping()) << "no WRs: grouped, as before (no stream at all)";
  req.wrs.push_back({2, 0, 0, 0, 1});
  EXPECT_FALSE(req.needs_grouping()) << "one WR";
  for (uint32_t i = 1; i < 4; ++i) req.wrs.push_back({2, 0, i, 0, 1});
  EXPECT_FALSE(req.needs_grouping()) << "four WRs on domain 2";
  req.wrs.back().domain = 3;
  EXPECT_TRUE(req.needs_grouping()) << "the last WR on another domain";
  req.wrs.back().domain = 2;
  req.wrs.front().domain = 0;
  EXPECT_TRUE(req.needs_grouping()) << "the first WR on another domain";
  req.paged = true;
  EXPECT_FALSE(req.needs_grouping()) << "a paged write goes by its page runs";
  req.paged = false;
  req.kind = detail::RequestKind::kSend;
  EXPECT_FALSE(req.needs_grouping()) << "a send";
  // The planner's one-medium placement: a 1 MiB write as 4 shards, all on the start domain.
  req.kind = detail::RequestKind::kWrite;
  req.wrs.clear();
  planner::plan_write(WriteRequest{{}, 0, {}, 0, MiB}, 4, 1, req.wrs, planner::Placement::kFirstDomain);
  ASSERT_EQ(req.wrs.size(), 4u);
  EXPECT_FALSE(req.needs_grouping());
  req.wrs.clear();
  planner::plan_write(WriteRequest{{}, 0, {}, 0, MiB}, 4, 1, req.wrs, planner::Placement::kRotate);
  EXPECT_TRUE(req.needs_grouping());
  detail::group_by_domain(req, 4);
  EXPECT_TRUE(req.grouped_by_domain());
  req.reset();
  EXPECT_FALSE(req.grouped_by_domain()) << "reset() forgets the groups";
}

// group_by_domain() on a real plan (a kByBytes scatter over 4 domains) keeps every WR.
TEST(RequestGrouping, GroupsAScatterPlan) {
  ScatterRequest sreq;
  sreq.sharding = ScatterSharding::kByBytes;
  for (uint32_t t = 0; t < 5; ++t) sreq.targets.push_back({MiB + t, t * MiB, 0, {}, t});
  detail::Request req;
  planner::plan_scatter(sreq, 4, 1, req.wrs);
  const size_t total = req.wrs.size();
  ASSERT_EQ(total, 20u);  // 5 targets x 4 shards of ~256 KiB
  detail::group_by_domain(req, 4);
  ASSERT_EQ(req.domain_begin.size(), 5u);
  for (uint32_t d = 0; d < 4; ++d) {
    EXPECT_EQ(req.domain_begin[d + 1] - req.domain_begin[d], 5u) << d;
    for (uint32_t i = req.domain_begin[d]; i < req.domain_begin[d + 1]; ++i) EXPECT_EQ(req.wrs[i].domain, d);
  }
  uint64_t bytes = 0;
  for (const WrPlan& w : req.wrs) bytes += w.length;
  EXPECT_EQ(bytes, 5 * MiB + 10);
}

}  // namespace
}  // namespace fabric_lib

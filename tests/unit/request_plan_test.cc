// Whole-request plans (src/core/shard_planner.h): every byte and page of a write, paged write,
// scatter or imm-only request in exactly one WR, on the domain the rules say, with imm counts that
// agree with imm_count_of(). The grouping of a request's WRs: request_grouping_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/request.h"
#include "core/shard_planner.h"
#include "fabric_lib/requests.h"
#include "planner_test_support.h"

namespace fabric_lib {
namespace {

using namespace testing_planner;
using planner::PageRun;
using planner::WritePiece;
using planner::WrPlan;

// ---- whole-request plans ---------------------------------------------------------------------

// Marks [begin, begin + len) in `counts`; returns false if it falls outside.
bool mark(std::vector<uint8_t>& counts, uint64_t begin, uint64_t len) {
  if (begin > counts.size() || len > counts.size() - begin) return false;
  for (uint64_t i = begin; i < begin + len; ++i) ++counts[i];
  return true;
}

// A write of `len` bytes on `route` with imm 5, at random offsets below 10000.
WriteRequest random_write(uint64_t len, const Route& route, std::mt19937_64& rng) {
  WriteRequest req;
  req.length = len;
  req.src_offset = rng() % 10000;
  req.dst_offset = rng() % 10000;
  req.route = route;
  req.imm = 5;
  return req;
}

// plan_write(): every source and destination byte exactly once, offsets shifted by the request's,
// one target, domains as plan_contiguous() assigns them.
// A scatter without targets yet: its sharding, route and imm.
ScatterRequest scatter_request(ScatterSharding sharding, const Route& route, uint32_t imm) {
  ScatterRequest req;
  req.sharding = sharding;
  req.route = route;
  req.imm = imm;
  return req;
}

TEST(ShardPlanner, PlanWriteCoversEveryByteOnce) {
  std::mt19937_64 rng(99);
  for (size_t n : {size_t{1}, size_t{2}, size_t{3}, size_t{4}, size_t{8}, size_t{16}}) {
    for (const Route& route : test_routes(n)) {
      for (uint64_t len : {uint64_t{1}, uint64_t{4096}, 64 * KiB + 1, 300 * KiB + 7, MiB + 3}) {
        WriteRequest req = random_write(len, route, rng);
        const uint32_t start = static_cast<uint32_t>(rng() % 64);
        std::vector<WrPlan> plan;
        planner::plan_write(req, n, start, plan);
        std::vector<WritePiece> pieces;
        planner::plan_contiguous(len, route, n, start, pieces);
        ASSERT_EQ(plan.size(), pieces.size());
        EXPECT_EQ(imm_count_of(req, n), plan.size());

        std::vector<uint8_t> src(req.src_offset + len + 16, 0), dst(req.dst_offset + len + 16, 0);
        for (size_t i = 0; i < plan.size(); ++i) {
          const WrPlan& w = plan[i];
          EXPECT_EQ(w.target, 0u);
          EXPECT_EQ(w.domain, pieces[i].domain);
          EXPECT_LT(w.domain, n);
          EXPECT_EQ(w.src_offset, req.src_offset + pieces[i].offset);
          EXPECT_EQ(w.dst_offset - w.src_offset, req.dst_offset - req.src_offset);
          ASSERT_TRUE(mark(src, w.src_offset, w.length));
          ASSERT_TRUE(mark(dst, w.dst_offset, w.length));
        }
        for (uint64_t i = 0; i < src.size(); ++i) {
          const bool inside = i >= req.src_offset && i < req.src_offset + len;
          ASSERT_EQ(src[i], inside ? 1 : 0) << "src byte " << i;
        }
        for (uint64_t i = 0; i < dst.size(); ++i) {
          const bool inside = i >= req.dst_offset && i < req.dst_offset + len;
          ASSERT_EQ(dst[i], inside ? 1 : 0) << "dst byte " << i;
        }
        req.imm.reset();
        EXPECT_EQ(imm_count_of(req, n), 0u);
      }
    }
  }
}

// Placement::kFirstDomain (one-medium groups): the same WRs as kRotate — offsets, lengths, count,
// so imm_count_of() still holds — every one on the domain kRotate gives the first; for a by-bytes
// scatter, per destination (destinations still rotate); kByPeer is unchanged.
TEST(ShardPlanner, FirstDomainPlacementKeepsTheWrsAndMovesThemToTheFirstShardsDomain) {
  std::mt19937_64 rng(7);
  for (size_t n : {size_t{1}, size_t{2}, size_t{4}, size_t{8}}) {
    for (const Route& route : test_routes(n)) {
      for (uint64_t len : {uint64_t{0}, uint64_t{4096}, 128 * KiB, 300 * KiB + 7, MiB + 3, 3 * kMaxWrBytes + 5}) {
        const uint32_t start = static_cast<uint32_t>(rng() % 64);
        SCOPED_TRACE("len=" + std::to_string(len) + " N=" + std::to_string(n) + " " + route_name(route));
        const WriteRequest req = random_write(len, route, rng);
        std::vector<WrPlan> rotate, first;
        planner::plan_write(req, n, start, rotate, planner::Placement::kRotate);
        planner::plan_write(req, n, start, first, planner::Placement::kFirstDomain);
        ASSERT_EQ(first.size(), rotate.size());
        EXPECT_EQ(imm_count_of(req, n), first.size());
        for (size_t i = 0; i < first.size(); ++i) {
          EXPECT_EQ(first[i].domain, rotate[0].domain) << "WR " << i;
          EXPECT_EQ(first[i].src_offset, rotate[i].src_offset) << "WR " << i;
          EXPECT_EQ(first[i].dst_offset, rotate[i].dst_offset) << "WR " << i;
          EXPECT_EQ(first[i].length, rotate[i].length) << "WR " << i;
        }
        for (ScatterSharding sharding : {ScatterSharding::kByPeer, ScatterSharding::kByBytes}) {
          ScatterRequest sc;
          sc.sharding = sharding;
          sc.route = route;
          sc.imm = 3;
          for (uint64_t t = 0; t < 3; ++t) sc.targets.push_back({len, t * len, 0, {}, 0});
          std::vector<WrPlan> rotated, kept;
          planner::plan_scatter(sc, n, start, rotated, planner::Placement::kRotate);
          planner::plan_scatter(sc, n, start, kept, planner::Placement::kFirstDomain);
          ASSERT_EQ(kept.size(), rotated.size());
          std::map<uint32_t, uint32_t> first_domain;  // target -> the domain of its first WR under kRotate
          for (const WrPlan& w : rotated) first_domain.emplace(w.target, w.domain);
          for (size_t i = 0; i < kept.size(); ++i) {
            EXPECT_EQ(kept[i].target, rotated[i].target);
            EXPECT_EQ(kept[i].src_offset, rotated[i].src_offset);
            EXPECT_EQ(kept[i].length, rotated[i].length);
            EXPECT_EQ(kept[i].domain, first_domain[kept[i].target]) << "scatter WR " << i;
          }
          for (uint32_t t = 0; t < 3; ++t) {
            uint64_t wrs = 0;
            for (const WrPlan& w : kept) wrs += w.target == t;
            EXPECT_EQ(imm_count_of(sc, t, n), wrs) << "target " << t;
          }
        }
      }
    }
  }
}

// A zero-length write with an imm is one empty WR (one imm at the target).
TEST(ShardPlanner, ZeroLengthWriteIsOneEmptyWr) {
  WriteRequest req;
  req.length = 0;
  req.src_offset = 10;
  req.dst_offset = 20;
  req.imm = 1;
  std::vector<WrPlan> plan;
  planner::plan_write(req, 4, 2, plan);
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].length, 0u);
  EXPECT_EQ(plan[0].src_offset, 10u);
  EXPECT_EQ(plan[0].dst_offset, 20u);
  EXPECT_EQ(plan[0].domain, 2u);
  EXPECT_EQ(imm_count_of(req, 4), 1u);
}

// plan_paged(): WR i is page i of the (permuted) lists at src_offset + src_pages[i]*src_stride and
// dst_offset + dst_pages[i]*dst_stride; every byte of every page once; runs on rotating domains;
// imm_count_of() == pages with an imm, 0 without.
TEST(ShardPlanner, PlanPagedCoversEveryPageOnce) {
  std::mt19937_64 rng(5);
  for (size_t n : {size_t{1}, size_t{2}, size_t{3}, size_t{5}, size_t{16}}) {
    for (const Route& route : test_routes(n)) {
      for (size_t pages : {size_t{1}, size_t{2}, size_t{7}, size_t{16}, size_t{33}, size_t{100}}) {
        PagedWriteRequest req;
        req.page_length = 1 + rng() % 300;
        req.src_stride = req.page_length + rng() % 50;
        req.dst_stride = req.page_length + rng() % 50;
        req.src_offset = rng() % 1000;
        req.dst_offset = rng() % 1000;
        req.route = route;
        const size_t slots = pages + rng() % 20;  // page indices are drawn from [0, slots)
        std::vector<uint32_t> idx(slots);
        std::iota(idx.begin(), idx.end(), 0);
        std::shuffle(idx.begin(), idx.end(), rng);
        req.src_pages.assign(idx.begin(), idx.begin() + pages);
        std::shuffle(idx.begin(), idx.end(), rng);
        req.dst_pages.assign(idx.begin(), idx.begin() + pages);
        const uint32_t start = static_cast<uint32_t>(rng() % 100);
        SCOPED_TRACE("pages=" + std::to_string(pages) + " N=" + std::to_string(n) + " " + route_name(route));

        std::vector<WrPlan> plan = {{7, 7, 7, 7, 7}};  // plan_paged appends
        planner::plan_paged(req, n, start, plan);
        ASSERT_EQ(plan.size(), pages + 1);
        EXPECT_EQ(plan[0].domain, 7u);
        plan.erase(plan.begin());

        std::vector<PageRun> runs;
        planner::plan_pages(pages, route, n, start, runs);
        std::vector<uint8_t> src(req.src_offset + slots * req.src_stride + req.page_length, 0);
        std::vector<uint8_t> dst(req.dst_offset + slots * req.dst_stride + req.page_length, 0);
        for (size_t i = 0; i < pages; ++i) {
          const WrPlan& w = plan[i];
          EXPECT_EQ(w.src_offset, req.src_offset + uint64_t{req.src_pages[i]} * req.src_stride) << i;
          EXPECT_EQ(w.dst_offset, req.dst_offset + uint64_t{req.dst_pages[i]} * req.dst_stride) << i;
          EXPECT_EQ(w.length, req.page_length);
          EXPECT_EQ(w.target, 0u);
          EXPECT_LT(w.domain, n);
          const auto run = std::find_if(runs.begin(), runs.end(), [&](const PageRun& r) { return i >= r.begin && i < r.end; });
          ASSERT_NE(run, runs.end());
          EXPECT_EQ(w.domain, run->domain) << i;
          ASSERT_TRUE(mark(src, w.src_offset, w.length));
          ASSERT_TRUE(mark(dst, w.dst_offset, w.length));
        }
        // Each byte of each requested page exactly once, nothing else.
        std::vector<uint8_t> want_src(src.size(), 0), want_dst(dst.size(), 0);
        for (size_t i = 0; i < pages; ++i) {
          mark(want_src, req.src_offset + uint64_t{req.src_pages[i]} * req.src_stride, req.page_length);
          mark(want_dst, req.dst_offset + uint64_t{req.dst_pages[i]} * req.dst_stride, req.page_length);
        }
        EXPECT_EQ(src, want_src);
        EXPECT_EQ(dst, want_dst);

        EXPECT_EQ(imm_count_of(req, n), 0u);
        req.imm = 77;
        EXPECT_EQ(imm_count_of(req, n), pages);
        if (std::holds_alternative<Pinned>(route)) {
          for (const WrPlan& w : plan) EXPECT_EQ(w.domain, std::get<Pinned>(route).domain);
        }
      }
    }
  }
}

// plan_scatter(): for both shardings, each target's bytes exactly once with its offsets, on the
// documented domains; imm_count_of(request, t, N) == WRs with target t.
TEST(ShardPlanner, PlanScatterAndImmCounts) {
  std::mt19937_64 rng(31337);
  // Around the two-shard bound too (128 KiB is the shortest target split in two).
  const std::vector<uint64_t> target_lengths = {0,          1,          4096,      64 * KiB - 1, 64 * KiB + 1,
                                                128 * KiB - 1, 128 * KiB, 300 * KiB, MiB + 3};
  for (size_t n : {size_t{1}, size_t{2}, size_t{3}, size_t{4}, size_t{16}}) {
    for (const Route& route : test_routes(n)) {
      for (ScatterSharding sharding : {ScatterSharding::kByPeer, ScatterSharding::kByBytes}) {
        ScatterRequest req = scatter_request(sharding, route, 3);
        const size_t targets = 1 + rng() % 12;
        for (size_t t = 0; t < targets; ++t) {
          ScatterTarget tg;
          tg.length = target_lengths[rng() % target_lengths.size()];
          tg.src_offset = rng() % (2 * MiB);
          tg.dst_offset = rng() % 5000;
          req.targets.push_back(tg);
        }
        const uint32_t start = static_cast<uint32_t>(rng() % 1000);
        SCOPED_TRACE(std::string(sharding == ScatterSharding::kByPeer ? "byPeer" : "byBytes") +
                     " N=" + std::to_string(n) + " " + route_name(route) + " start=" + std::to_string(start));
        std::vector<WrPlan> plan;
        planner::plan_scatter(req, n, start, plan);

        std::map<uint32_t, std::vector<WrPlan>> by_target;
        for (const WrPlan& w : plan) {
          ASSERT_LT(w.target, targets);
          ASSERT_LT(w.domain, n);
          by_target[w.target].push_back(w);
        }
        for (uint32_t t = 0; t < targets; ++t) {
          const ScatterTarget& tg = req.targets[t];
          const std::vector<WrPlan>& wrs = by_target[t];
          ASSERT_FALSE(wrs.empty()) << "target " << t;
          EXPECT_EQ(imm_count_of(req, t, n), wrs.size()) << "target " << t;
          // Exact, ordered cover of the target's source range, destination shifted alike.
          uint64_t at = tg.src_offset;
          for (const WrPlan& w : wrs) {
            EXPECT_EQ(w.src_offset, at) << "target " << t;
            EXPECT_EQ(w.dst_offset, tg.dst_offset + (w.src_offset - tg.src_offset)) << "target " << t;
            EXPECT_LE(w.length, kMaxWrBytes);
            at += w.length;
          }
          EXPECT_EQ(at, tg.src_offset + tg.length) << "target " << t;
          if (tg.length == 0) {
            EXPECT_EQ(wrs.size(), 1u);
          }
          // Domains.
          if (sharding == ScatterSharding::kByPeer) {
            const uint32_t d = planner::domain_of(t, route, n, start);
            for (const WrPlan& w : wrs) EXPECT_EQ(w.domain, d) << "target " << t;
            EXPECT_EQ(d, expected_domain(t, route, n, start));
          } else {
            std::vector<WritePiece> pieces;
            planner::plan_contiguous(tg.length, route, n, start + t, pieces);
            ASSERT_EQ(pieces.size(), wrs.size());
            for (size_t i = 0; i < wrs.size(); ++i) EXPECT_EQ(wrs[i].domain, pieces[i].domain);
          }
        }
        EXPECT_EQ(imm_count_of(req, targets, n), 0u) << "out-of-range target";
        EXPECT_EQ(imm_count_of(req, targets + 100, n), 0u);
        req.imm.reset();
        for (uint32_t t = 0; t < targets; ++t) EXPECT_EQ(imm_count_of(req, t, n), 0u);
      }
    }
  }
}

// A scatter target longer than kMaxWrBytes is split into several WRs (both shardings), and
// imm_count_of() counts them.
TEST(ShardPlanner, ScatterLongTargetSplitsWrs) {
  for (ScatterSharding sharding : {ScatterSharding::kByPeer, ScatterSharding::kByBytes}) {
    ScatterRequest req;
    req.sharding = sharding;
    req.imm = 1;
    req.targets.push_back({3 * kMaxWrBytes + 5, 0, 0, {}, 0});
    req.targets.push_back({10, 0, 0, {}, 1});
    std::vector<WrPlan> plan;
    planner::plan_scatter(req, 2, 0, plan);
    size_t t0 = 0;
    uint64_t bytes = 0;
    for (const WrPlan& w : plan) {
      if (w.target == 0) {
        ++t0;
        bytes += w.length;
        EXPECT_LE(w.length, kMaxWrBytes);
      }
    }
    EXPECT_EQ(bytes, 3 * kMaxWrBytes + 5);
    EXPECT_EQ(t0, 4u);
    EXPECT_EQ(imm_count_of(req, 0, 2), 4u);
    EXPECT_EQ(imm_count_of(req, 1, 2), 1u);
  }
}

// plan_imm_only(): one zero-length WR per peer, peers rotating over domains from `start`.
// plan_scatter() (and a prepared scatter's ScatterPlanner) steps its destinations' domains
// instead of asking domain_of() for each: the same WRs, in the same order, as
// plan_scatter_piece() per destination — over more destinations
// than domains (the rotation wraps), starts past the domain count and near 2^32, every route,
// both shardings and placements, short and long destinations mixed.
TEST(ShardPlanner, PlanScatterIsPlanScatterPiecePerDestination) {
  std::mt19937_64 rng(2027);
  const std::vector<uint64_t> lengths = {0, 1, 4096, 128 * KiB - 1, 128 * KiB, 300 * KiB, MiB + 3};
  for (size_t n : {size_t{0}, size_t{1}, size_t{2}, size_t{3}, size_t{4}, size_t{8}, size_t{16}}) {
    for (const Route& route : test_routes(n == 0 ? 1 : n)) {
      for (ScatterSharding sharding : {ScatterSharding::kByPeer, ScatterSharding::kByBytes}) {
        for (planner::Placement placement : {planner::Placement::kRotate, planner::Placement::kFirstDomain}) {
          ScatterRequest req = scatter_request(sharding, route, 1);
          const size_t targets = 1 + rng() % 70;
          for (size_t t = 0; t < targets; ++t) {
            req.targets.push_back({lengths[rng() % lengths.size()], rng() % MiB, rng() % 5000, {}, 0});
          }
          // Small starts, and starts whose sum with a destination index passes 2^32 (the group's
          // start counter after 2^32 submits).
          const uint32_t start = rng() % 2 == 0 ? static_cast<uint32_t>(rng() % 100) : UINT32_MAX - static_cast<uint32_t>(rng() % 40);
          SCOPED_TRACE(std::string(sharding == ScatterSharding::kByPeer ? "byPeer" : "byBytes") + " N=" +
                       std::to_string(n) + " " + route_name(route) + " start=" + std::to_string(start) +
                       " targets=" + std::to_string(targets));
          std::vector<WrPlan> plan, reference;
          planner::plan_scatter(req, n, start, plan, placement);
          for (size_t t = 0; t < targets; ++t) {
            const ScatterTarget& tg = req.targets[t];
            planner::plan_scatter_piece({static_cast<uint32_t>(t), tg.length, tg.src_offset, tg.dst_offset}, sharding,
                                        route, n, start, reference, placement);
          }
          auto expect_same = [](const std::vector<WrPlan>& got, const std::vector<WrPlan>& want) {
            ASSERT_EQ(got.size(), want.size());
            for (size_t i = 0; i < got.size(); ++i) {
              EXPECT_EQ(got[i].domain, want[i].domain) << "WR " << i;
              EXPECT_EQ(got[i].target, want[i].target) << "WR " << i;
              EXPECT_EQ(got[i].src_offset, want[i].src_offset) << "WR " << i;
              EXPECT_EQ(got[i].dst_offset, want[i].dst_offset) << "WR " << i;
              EXPECT_EQ(got[i].length, want[i].length) << "WR " << i;
            }
          };
          expect_same(plan, reference);
          // A prepared scatter's planner passes over destinations without WRs: the others keep
          // their own domains.
          planner::ScatterPlanner stepping(sharding, route, n, start, placement);
          std::vector<WrPlan> some, some_reference;
          for (size_t t = 0; t < targets; ++t) {
            const ScatterTarget& tg = req.targets[t];
            const planner::ScatterPiece piece{static_cast<uint32_t>(t), tg.length, tg.src_offset, tg.dst_offset};
            if (rng() % 3 == 0) {
              stepping.pass();
              continue;
            }
            stepping.add(piece, some);
            planner::plan_scatter_piece(piece, sharding, route, n, start, some_reference, placement);
          }
          expect_same(some, some_reference);
        }
      }
    }
  }
}

TEST(ShardPlanner, ImmOnlyPlan) {
  for (size_t n = 1; n <= 16; ++n) {
    for (size_t peers : {size_t{1}, size_t{3}, size_t{16}, size_t{40}}) {
      const uint32_t start = static_cast<uint32_t>(n * 3 + peers);
      std::vector<WrPlan> plan;
      planner::plan_imm_only(peers, n, start, plan);
      ASSERT_EQ(plan.size(), peers);
      std::vector<size_t> per_domain(n, 0);
      for (size_t t = 0; t < peers; ++t) {
        EXPECT_EQ(plan[t].target, t);
        EXPECT_EQ(plan[t].length, 0u);
        EXPECT_EQ(plan[t].src_offset, 0u);
        EXPECT_EQ(plan[t].dst_offset, 0u);
        EXPECT_EQ(plan[t].domain, (start + t) % n);
        ++per_domain[plan[t].domain];
      }
      // Spread evenly.
      const auto [lo, hi] = std::minmax_element(per_domain.begin(), per_domain.end());
      if (peers >= n) {
        EXPECT_LE(*hi - *lo, 1u);
      }
    }
  }
  EXPECT_EQ(kImmCountOfImmOnly, 1u);
  EXPECT_EQ(kImmCountOfBarrierPerPeer, 1u);
}

}  // namespace
}  // namespace fabric_lib

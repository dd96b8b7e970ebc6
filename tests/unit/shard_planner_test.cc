// Sharding rules (src/core/shard_planner.h) and imm_count_of() (include/fabric_lib/requests.h):
// what the sender posts and what the receiver expects must follow from the same plan.
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

namespace fabric_lib {
namespace {

using planner::PageRun;
using planner::WritePiece;
using planner::WrPlan;

constexpr uint64_t KiB = 1024;
constexpr uint64_t MiB = 1024 * 1024;

std::string route_name(const Route& r) {
  if (const Pinned* p = std::get_if<Pinned>(&r)) return "Pinned{" + std::to_string(p->domain) + "}";
  return "RoundRobin{" + std::to_string(std::get<RoundRobin>(r).max_shards) + "}";
}

std::vector<uint64_t> test_lengths() {
  std::vector<uint64_t> v = {0,        1,         4095,      4096,          4097,         64 * KiB - 1,
                             64 * KiB, 64 * KiB + 1, 128 * KiB + 1, 200 * KiB,  MiB,  MiB + 3,
                             17 * MiB + 12345, 64 * MiB, 3 * kMaxWrBytes + 5, 40 * kMaxWrBytes + 1};
  std::mt19937_64 rng(2024);
  for (int i = 0; i < 24; ++i) {
    // Log-uniform-ish: random bit width, then random value of that width.
    const int bits = 1 + static_cast<int>(rng() % 36);
    v.push_back(1 + rng() % (uint64_t{1} << bits));
  }
  return v;
}

std::vector<Route> test_routes(size_t n) {
  std::vector<Route> r = {RoundRobin{0}, RoundRobin{1}, RoundRobin{2}, RoundRobin{3},
                          RoundRobin{static_cast<uint32_t>(n)}, RoundRobin{static_cast<uint32_t>(n + 5)},
                          Pinned{0}, Pinned{static_cast<uint32_t>(n - 1)}, Pinned{static_cast<uint32_t>(n / 2)}};
  return r;
}

std::vector<uint32_t> test_starts(size_t n) {
  return {0, 1, static_cast<uint32_t>(n - 1), 7, 1000003, 0xfffffff0u};
}

size_t expected_limit(const Route& route, size_t n) {
  if (std::holds_alternative<Pinned>(route)) return 1;
  const uint32_t k = std::get<RoundRobin>(route).max_shards;
  return k == 0 ? n : std::min<size_t>(k, n);
}

// Shards and by-peer scatter targets rotate over the route's limit of consecutive domains.
uint32_t expected_domain(size_t i, const Route& route, size_t n, uint32_t start) {
  if (const Pinned* p = std::get_if<Pinned>(&route)) return p->domain;
  return static_cast<uint32_t>((uint64_t{start} + i % expected_limit(route, n)) % n);
}

// Shards of a contiguous plan: maximal runs of consecutive pieces on the same domain.
struct Shard {
  uint64_t begin, end;
  uint32_t domain;
};
std::vector<Shard> shards_of(const std::vector<WritePiece>& pieces) {
  std::vector<Shard> s;
  for (const WritePiece& p : pieces) {
    if (!s.empty() && s.back().domain == p.domain && s.back().end == p.offset) {
      s.back().end = p.offset + p.length;
    } else {
      s.push_back({p.offset, p.offset + p.length, p.domain});
    }
  }
  return s;
}

// Checks every documented property of one plan_contiguous() result.
void check_contiguous(uint64_t len, const Route& route, size_t n, uint32_t start) {
  SCOPED_TRACE("len=" + std::to_string(len) + " N=" + std::to_string(n) + " route=" + route_name(route) +
               " start=" + std::to_string(start));
  // plan_contiguous appends: keep a sentinel in front.
  std::vector<WritePiece> out = {{111, 222, 333}};
  const size_t appended = planner::plan_contiguous(len, route, n, start, out);
  ASSERT_EQ(out.size(), appended + 1);
  ASSERT_EQ(out[0].offset, 111u);
  ASSERT_EQ(out[0].length, 222u);
  std::vector<WritePiece> pieces(out.begin() + 1, out.end());
  ASSERT_FALSE(pieces.empty());

  // Counting agrees with planning.
  EXPECT_EQ(planner::count_contiguous(len, route, n), pieces.size());
  EXPECT_EQ(imm_count_of_write(len, route, n), pieces.size());

  if (len == 0) {
    ASSERT_EQ(pieces.size(), 1u);
    EXPECT_EQ(pieces[0].offset, 0u);
    EXPECT_EQ(pieces[0].length, 0u);
    EXPECT_EQ(pieces[0].domain, expected_domain(0, route, n, start));
    return;
  }
  // Exact cover of [0, len), in order, no empty piece, each within the WR size limit.
  uint64_t at = 0;
  for (const WritePiece& p : pieces) {
    ASSERT_EQ(p.offset, at);
    ASSERT_GT(p.length, 0u);
    ASSERT_LE(p.length, kMaxWrBytes);
    ASSERT_LT(p.domain, n);
    at += p.length;
  }
  ASSERT_EQ(at, len);

  const std::vector<Shard> shards = shards_of(pieces);
  ASSERT_LE(shards.size(), planner::shard_limit(route, n));
  ASSERT_EQ(planner::shard_limit(route, n), expected_limit(route, n));
  for (size_t s = 0; s < shards.size(); ++s) {
    // Shards go to successive domains from `start` (or all to the pinned one).
    EXPECT_EQ(shards[s].domain, expected_domain(s, route, n, start)) << "shard " << s;
    // Inner shard boundaries are aligned.
    if (s > 0) {
      EXPECT_EQ(shards[s].begin % kShardAlignBytes, 0u) << "shard " << s;
    }
  }
  // Only a shard's own WR splitting makes more than one piece: all but its last are max-size.
  for (size_t i = 0; i + 1 < pieces.size(); ++i) {
    if (pieces[i].domain == pieces[i + 1].domain) {
      EXPECT_EQ(pieces[i].length, kMaxWrBytes) << "piece " << i;
    }
  }
  // Tiny writes stay on one domain.
  if (len < kMinShardBytes) {
    EXPECT_EQ(shards.size(), 1u);
  }
  // Pinned: everything on the pinned domain.
  if (const Pinned* p = std::get_if<Pinned>(&route)) {
    for (const WritePiece& piece : pieces) EXPECT_EQ(piece.domain, p->domain);
  }
  // A write long enough for the whole limit uses it (the plan does not leave domains idle).
  if (len >= planner::shard_limit(route, n) * (kMinShardBytes + kShardAlignBytes)) {
    EXPECT_EQ(shards.size(), planner::shard_limit(route, n));
  }
}

// plan_contiguous/count_contiguous/imm_count_of_write over lengths x 1..16 domains x routes x
// start domains: exact ordered cover, WR size limit, shard count/alignment/domains, tiny writes
// on one domain, Pinned on its domain, and count == pieces.
TEST(ShardPlanner, ContiguousPlanProperties) {
  const std::vector<uint64_t> lengths = test_lengths();
  for (size_t n = 1; n <= kMaxDomainsPerGroup; ++n) {
    for (const Route& route : test_routes(n)) {
      for (uint32_t start : test_starts(n)) {
        for (uint64_t len : lengths) {
          check_contiguous(len, route, n, start);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

// requests.h: "A single write is split over the domains only in shards of at least
// kMinShardBytes". Every shard except the last (which takes the remainder) must hold at least
// kMinShardBytes; e.g. 64 KiB + 1 bytes must not become two ~32 KiB shards.
TEST(ShardPlanner, SplitShardsAreAtLeastMinShardBytes) {
  const std::vector<uint64_t> lengths = test_lengths();
  for (size_t n = 1; n <= kMaxDomainsPerGroup; ++n) {
    for (uint64_t len : lengths) {
      std::vector<WritePiece> pieces;
      planner::plan_contiguous(len, RoundRobin{0}, n, 0, pieces);
      const std::vector<Shard> shards = shards_of(pieces);
      for (size_t s = 0; s + 1 < shards.size(); ++s) {
        EXPECT_GE(shards[s].end - shards[s].begin, kMinShardBytes)
            << "len=" << len << " N=" << n << ": shard " << s << " of " << shards.size() << " has "
            << shards[s].end - shards[s].begin << " bytes";
      }
    }
  }
}

// Pins concrete plans: small writes, an exact 4-way split, and the balanced 16-way split of 64 MiB.
TEST(ShardPlanner, ConcretePlans) {
  std::vector<WritePiece> p;
  planner::plan_contiguous(4096, RoundRobin{0}, 4, 2, p);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].offset, 0u);
  EXPECT_EQ(p[0].length, 4096u);
  EXPECT_EQ(p[0].domain, 2u);

  p.clear();
  planner::plan_contiguous(64 * KiB, RoundRobin{0}, 4, 3, p);  // exactly one minimum shard
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].length, 64 * KiB);
  EXPECT_EQ(p[0].domain, 3u);

  p.clear();
  planner::plan_contiguous(256 * KiB, RoundRobin{0}, 4, 3, p);
  ASSERT_EQ(p.size(), 4u);
  for (uint32_t i = 0; i < 4; ++i) {
    EXPECT_EQ(p[i].offset, i * 64 * KiB);
    EXPECT_EQ(p[i].length, 64 * KiB);
    EXPECT_EQ(p[i].domain, (3 + i) % 4);
  }

  p.clear();
  planner::plan_contiguous(64 * MiB, RoundRobin{0}, 16, 5, p);
  ASSERT_EQ(p.size(), 16u);
  for (uint32_t i = 0; i < 16; ++i) {
    EXPECT_EQ(p[i].offset, i * 4 * MiB);
    EXPECT_EQ(p[i].length, 4 * MiB);
    EXPECT_EQ(p[i].domain, (5 + i) % 16);
  }

  p.clear();
  planner::plan_contiguous(64 * MiB, RoundRobin{2}, 16, 15, p);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].length, 32 * MiB);
  EXPECT_EQ(p[0].domain, 15u);
  EXPECT_EQ(p[1].domain, 0u);
}

// A shard longer than kMaxWrBytes becomes several WRs of at most kMaxWrBytes, each counted.
TEST(ShardPlanner, LongShardsSplitIntoMaxSizedWrs) {
  const uint64_t len = 3 * kMaxWrBytes + 5;
  std::vector<WritePiece> p;
  planner::plan_contiguous(len, Pinned{3}, 4, 0, p);
  ASSERT_EQ(p.size(), 4u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(p[i].offset, i * kMaxWrBytes);
    EXPECT_EQ(p[i].length, kMaxWrBytes);
    EXPECT_EQ(p[i].domain, 3u);
  }
  EXPECT_EQ(p[3].offset, 3 * kMaxWrBytes);
  EXPECT_EQ(p[3].length, 5u);
  EXPECT_EQ(imm_count_of_write(len, Pinned{3}, 4), 4u);

  // Two domains: shards of ceil(len / 2) rounded up to 4 KiB, each split at 1 GiB.
  p.clear();
  planner::plan_contiguous(len, RoundRobin{0}, 2, 1, p);
  const uint64_t shard = 393217 * kShardAlignBytes;  // ceil(ceil(len / 2) / 4096) * 4096
  ASSERT_EQ(shard, 1610616832u);
  ASSERT_EQ(p.size(), 4u);
  EXPECT_EQ(p[0].offset, 0u);
  EXPECT_EQ(p[0].length, kMaxWrBytes);
  EXPECT_EQ(p[0].domain, 1u);
  EXPECT_EQ(p[1].offset, kMaxWrBytes);
  EXPECT_EQ(p[1].length, shard - kMaxWrBytes);
  EXPECT_EQ(p[1].domain, 1u);
  EXPECT_EQ(p[2].offset, shard);
  EXPECT_EQ(p[2].length, kMaxWrBytes);
  EXPECT_EQ(p[2].domain, 0u);
  EXPECT_EQ(p[3].offset, shard + kMaxWrBytes);
  EXPECT_EQ(p[3].length, len - shard - kMaxWrBytes);
  EXPECT_EQ(p[3].domain, 0u);
  EXPECT_EQ(imm_count_of_write(len, RoundRobin{0}, 2), 4u);

  // Exactly kMaxWrBytes is one WR; one byte more is two.
  EXPECT_EQ(imm_count_of_write(kMaxWrBytes, Pinned{0}, 1), 1u);
  EXPECT_EQ(imm_count_of_write(kMaxWrBytes + 1, Pinned{0}, 1), 2u);
}

// imm_count_of_write() is a total function: it returns (never divides by zero or traps) for
// every length, including lengths above 2^64 - 4096 on a single-shard route, where rounding the
// shard size up to kShardAlignBytes overflows to 0. The answer must still cover the bytes with
// WRs of at most kMaxWrBytes. Each length runs in a child process so a trap fails only this test.
TEST(ShardPlannerDeathTest, CountIsTotalNearTwoToThe64) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const uint64_t max = std::numeric_limits<uint64_t>::max();
  struct Case {
    uint64_t len;
    Route route;
    size_t domains;
  };
  for (const Case& c : {Case{max, Pinned{0}, 1}, Case{max - 1, RoundRobin{1}, 8}, Case{max - 4094, RoundRobin{0}, 1},
                        Case{max - 4095, Pinned{0}, 1}, Case{max / 2 + 1, Pinned{2}, 4}}) {
    const uint64_t min_wrs = c.len / kMaxWrBytes + (c.len % kMaxWrBytes != 0);
    EXPECT_EXIT(
        {
          const uint64_t n = imm_count_of_write(c.len, c.route, c.domains);
          std::exit(n >= min_wrs ? 0 : 1);
        },
        ::testing::ExitedWithCode(0), "")
        << "len=" << c.len << " route=" << route_name(c.route) << " N=" << c.domains;
  }
}

// shard_limit() and domain_of(): the route's reach and its rotation.
TEST(ShardPlanner, ShardLimitAndDomainOf) {
  EXPECT_EQ(planner::shard_limit(RoundRobin{0}, 8), 8u);
  EXPECT_EQ(planner::shard_limit(RoundRobin{3}, 8), 3u);
  EXPECT_EQ(planner::shard_limit(RoundRobin{9}, 8), 8u);
  EXPECT_EQ(planner::shard_limit(Pinned{5}, 8), 1u);
  for (size_t n = 1; n <= 16; ++n) {
    for (uint32_t start : test_starts(n)) {
      for (size_t i = 0; i < 40; ++i) {
        EXPECT_EQ(planner::domain_of(i, RoundRobin{0}, n, start), (uint64_t{start} + i) % n);
        EXPECT_EQ(planner::domain_of(i, Pinned{static_cast<uint32_t>(n - 1)}, n, start), n - 1);
      }
    }
  }
}

// plan_pages(): at most shard_limit() balanced contiguous runs covering [0, pages), on rotating
// domains.
TEST(ShardPlanner, PageRuns) {
  for (size_t n = 1; n <= 16; ++n) {
    for (const Route& route : test_routes(n)) {
      for (uint32_t start : {0u, 5u}) {
        for (size_t pages : {size_t{0}, size_t{1}, size_t{2}, size_t{3}, size_t{15}, size_t{16}, size_t{17},
                             size_t{100}, size_t{1000}}) {
          SCOPED_TRACE("pages=" + std::to_string(pages) + " N=" + std::to_string(n) + " " + route_name(route));
          std::vector<PageRun> runs = {{9, 9, 9}};
          const size_t appended = planner::plan_pages(pages, route, n, start, runs);
          ASSERT_EQ(runs.size(), appended + 1);
          runs.erase(runs.begin());
          if (pages == 0) {
            EXPECT_TRUE(runs.empty());
            continue;
          }
          ASSERT_EQ(runs.size(), std::min(expected_limit(route, n), pages));
          uint32_t at = 0;
          size_t min_len = SIZE_MAX, max_len = 0;
          for (size_t r = 0; r < runs.size(); ++r) {
            EXPECT_EQ(runs[r].begin, at);
            ASSERT_GT(runs[r].end, runs[r].begin);
            EXPECT_EQ(runs[r].domain, expected_domain(r, route, n, start));
            min_len = std::min<size_t>(min_len, runs[r].end - runs[r].begin);
            max_len = std::max<size_t>(max_len, runs[r].end - runs[r].begin);
            at = runs[r].end;
          }
          EXPECT_EQ(at, pages);
          EXPECT_LE(max_len - min_len, 1u);
        }
      }
    }
  }
}

// ---- whole-request plans ---------------------------------------------------------------------

// Marks [begin, begin + len) in `counts`; returns false if it falls outside.
bool mark(std::vector<uint8_t>& counts, uint64_t begin, uint64_t len) {
  if (begin > counts.size() || len > counts.size() - begin) return false;
  for (uint64_t i = begin; i < begin + len; ++i) ++counts[i];
  return true;
}

// plan_write(): every source and destination byte exactly once, offsets shifted by the request's,
// one target, domains as plan_contiguous() assigns them.
TEST(ShardPlanner, PlanWriteCoversEveryByteOnce) {
  std::mt19937_64 rng(99);
  for (size_t n : {size_t{1}, size_t{2}, size_t{3}, size_t{4}, size_t{8}, size_t{16}}) {
    for (const Route& route : test_routes(n)) {
      for (uint64_t len : {uint64_t{1}, uint64_t{4096}, 64 * KiB + 1, 300 * KiB + 7, MiB + 3}) {
        WriteRequest req;
        req.length = len;
        req.src_offset = rng() % 10000;
        req.dst_offset = rng() % 10000;
        req.route = route;
        req.imm = 5;
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
  const std::vector<uint64_t> target_lengths = {0, 1, 4096, 64 * KiB - 1, 64 * KiB + 1, 300 * KiB, MiB + 3};
  for (size_t n : {size_t{1}, size_t{2}, size_t{3}, size_t{4}, size_t{16}}) {
    for (const Route& route : test_routes(n)) {
      for (ScatterSharding sharding : {ScatterSharding::kByPeer, ScatterSharding::kByBytes}) {
        ScatterRequest req;
        req.sharding = sharding;
        req.route = route;
        req.imm = 3;
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

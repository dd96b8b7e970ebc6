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
#include "planner_test_support.h"

namespace fabric_lib {
namespace {

using namespace testing_planner;
using planner::PageRun;
using planner::WritePiece;
using planner::WrPlan;


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

}  // namespace
}  // namespace fabric_lib

// fabric-bench's statistics (nearest-rank percentiles, summaries, throughput) and its size parsing.
#include <gtest/gtest.h>

#include <vector>

#include "fabric_bench/options.h"
#include "fabric_bench/stats.h"

namespace fabric_lib::bench {
namespace {

TEST(BenchStatsTest, NearestRankPercentiles) {
  const std::vector<double> ten = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  EXPECT_EQ(percentile_of_sorted(ten, 0), 1);
  EXPECT_EQ(percentile_of_sorted(ten, 10), 1);
  EXPECT_EQ(percentile_of_sorted(ten, 11), 2);
  EXPECT_EQ(percentile_of_sorted(ten, 50), 5);   // rank ceil(5.0) = 5, not interpolated 5.5
  EXPECT_EQ(percentile_of_sorted(ten, 99), 10);
  EXPECT_EQ(percentile_of_sorted(ten, 100), 10);
  EXPECT_EQ(percentile_of_sorted(ten, 150), 10);  // clamped
  const std::vector<double> one = {42};
  EXPECT_EQ(percentile_of_sorted(one, 50), 42);
  EXPECT_EQ(percentile_of_sorted(one, 99), 42);
  EXPECT_EQ(percentile_of_sorted(std::vector<double>{}, 50), 0);
  // p99 of 1000 samples is the 990th smallest.
  std::vector<double> many;
  for (int i = 1; i <= 1000; ++i) many.push_back(i);
  EXPECT_EQ(percentile_of_sorted(many, 99), 990);
  EXPECT_EQ(percentile_of_sorted(many, 50), 500);
}

TEST(BenchStatsTest, SummarizeSortsACopy) {
  const std::vector<double> samples = {5, 1, 4, 2, 3};
  const std::optional<LatencySummary> s = summarize(samples);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->count, 5u);
  EXPECT_EQ(s->min, 1);
  EXPECT_EQ(s->max, 5);
  EXPECT_EQ(s->p50, 3);
  EXPECT_EQ(s->p99, 5);
  EXPECT_DOUBLE_EQ(s->mean, 3);
  EXPECT_EQ(samples[0], 5);  // untouched
  EXPECT_FALSE(summarize(std::vector<double>{}).has_value());

  const std::vector<uint32_t> ns = {1500, 500, 1000};
  const std::optional<LatencySummary> us = summarize_ns_as_us(ns);
  ASSERT_TRUE(us.has_value());
  EXPECT_DOUBLE_EQ(us->p50, 1.0);
  EXPECT_DOUBLE_EQ(us->max, 1.5);
}

TEST(BenchStatsTest, Throughput) {
  const Throughput t = throughput_of(1'000'000'000, 2'000'000, 2.0);
  EXPECT_DOUBLE_EQ(t.gbps, 4.0);
  EXPECT_DOUBLE_EQ(t.mops, 1.0);
  EXPECT_EQ(throughput_of(100, 1, 0).gbps, 0);  // no division by zero
}

TEST(BenchStatsTest, SizesParseAndPrint) {
  uint64_t v = 0;
  ASSERT_TRUE(parse_size("4KiB", &v));
  EXPECT_EQ(v, 4096u);
  ASSERT_TRUE(parse_size("64k", &v));
  EXPECT_EQ(v, 65536u);
  ASSERT_TRUE(parse_size("2M", &v));
  EXPECT_EQ(v, 2u << 20);
  ASSERT_TRUE(parse_size("1000", &v));
  EXPECT_EQ(v, 1000u);
  EXPECT_FALSE(parse_size("", &v));
  EXPECT_FALSE(parse_size("KiB", &v));
  EXPECT_FALSE(parse_size("4 parsecs", &v));
  EXPECT_FALSE(parse_size("99999999999999999999", &v));
  EXPECT_EQ(format_size(1024), "1 KiB");
  EXPECT_EQ(format_size(64u << 20), "64 MiB");
  EXPECT_EQ(format_size(1536), "1536 B");
  EXPECT_EQ(power_of_two_range(1024, 16384, 2), (std::vector<uint64_t>{1024, 4096, 16384}));
}

}  // namespace
}  // namespace fabric_lib::bench

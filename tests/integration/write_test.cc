// Single and paged writes, imm-only requests and imm counting, between two processes, over the
// whole provider matrix.
#include <algorithm>
#include <numeric>
#include <random>

#include "integration/engine_fixture.h"

namespace fabric_lib::testing {
namespace {

constexpr size_t kMiB = 1 << 20;

// Edge sizes land byte-exact at the right offsets, and the target counts exactly the imms
// imm_count_of() predicts (several shards per write with 4 domains).
TEST_P(EngineTest, SingleWritesOfEdgeSizesLandExactly) {
  const size_t region = 66 * kMiB;
  AgentProcess agent(GetParam(), region);
  ASSERT_TRUE(agent.started());
  auto engine = make_engine();
  ASSERT_TRUE(engine);
  SourceBuffer src(*engine, region, 11);
  Shadow shadow(region);

  struct Case {
    uint64_t src_off, dst_off, len;
  };
  const std::vector<Case> cases = {{0, 0, 1},          {7, 100, 4097},        {4096, 8192, 64 * 1024 + 3},
                                   {3, kMiB + 1, kMiB + 5}, {0, 2 * kMiB, 64 * kMiB}};
  CompletionCounter done;
  uint32_t imm = 100;
  for (const Case& c : cases) {
    WriteRequest w{src.reg.handle, c.src_off, agent.desc(), c.dst_off, c.len, imm};
    const uint64_t expected = imm_count_of(w, domains());
    ASSERT_TRUE(engine->submit_write(w, Completion::counter(done)).ok());
    shadow.write(src, c.src_off, c.dst_off, c.len);
    EXPECT_TRUE(agent.expect_imms(imm, expected)) << "size " << c.len;
    ++imm;
  }
  wait_all(done, cases.size());
  EXPECT_EQ(done.errors, 0u);
  EXPECT_EQ(agent.hash(0, region), shadow.hash());
  // Nothing beyond the expectations arrived.
  for (uint32_t i = 100; i < imm; ++i) EXPECT_EQ(agent.count(i), 0u);
}

// A write without an imm completes Ok at the writer; with delivery-complete semantics the bytes
// are at the target by then, and a following imm-only request is counted once.
TEST_P(EngineTest, WriteWithoutImmThenImmOnly) {
  AgentProcess agent(GetParam(), kMiB);
  ASSERT_TRUE(agent.started());
  auto engine = make_engine();
  ASSERT_TRUE(engine);
  SourceBuffer src(*engine, kMiB, 12);
  Shadow shadow(kMiB);
  CompletionCounter done;
  ASSERT_TRUE(engine->submit_write({src.reg.handle, 0, agent.desc(), 512, 300000}, Completion::counter(done)).ok());
  shadow.write(src, 0, 512, 300000);
  wait_all(done, 1);
  ASSERT_TRUE(engine->submit_imm(55, agent.desc(), Completion::counter(done)).ok());
  wait_all(done, 2);
  EXPECT_EQ(done.errors, 0u);
  EXPECT_TRUE(agent.expect_imms(55, kImmCountOfImmOnly));
  EXPECT_EQ(agent.hash(0, kMiB), shadow.hash());
}

// Paged writes with permuted, non-contiguous page lists, strides larger than pages and odd
// page sizes: every page lands in its slot, one imm per page.
TEST_P(EngineTest, PagedWritesWithPermutedPages) {
  const size_t pages = 512;
  std::mt19937 rng(7);
  for (uint64_t page : {uint64_t{4096}, uint64_t{1000}}) {
    const uint64_t src_stride = page + 512, dst_stride = page + 96;
    const uint64_t src_off = 64, dst_off = 32;
    const size_t region = dst_off + (pages * 2) * dst_stride + page;
    AgentProcess agent(GetParam(), region);
    ASSERT_TRUE(agent.started());
    auto engine = make_engine();
    ASSERT_TRUE(engine);
    SourceBuffer src(*engine, src_off + pages * src_stride + page, 13);
    Shadow shadow(region);

    PagedWriteRequest p;
    p.src = src.reg.handle;
    p.dst = agent.desc();
    p.page_length = page;
    p.src_stride = src_stride;
    p.dst_stride = dst_stride;
    p.src_offset = src_off;
    p.dst_offset = dst_off;
    p.imm = 9;
    p.src_pages.resize(pages);
    std::iota(p.src_pages.begin(), p.src_pages.end(), 0);
    std::shuffle(p.src_pages.begin(), p.src_pages.end(), rng);
    std::vector<uint32_t> slots(pages * 2);  // destination pages: a permuted half of twice as many slots
    std::iota(slots.begin(), slots.end(), 0);
    std::shuffle(slots.begin(), slots.end(), rng);
    p.dst_pages.assign(slots.begin(), slots.begin() + pages);
    for (size_t i = 0; i < pages; ++i) {
      shadow.write(src, src_off + p.src_pages[i] * src_stride, dst_off + p.dst_pages[i] * dst_stride, page);
    }
    const uint64_t expected = imm_count_of(p, domains());
    EXPECT_EQ(expected, pages);
    CompletionCounter done;
    ASSERT_TRUE(engine->submit_paged_writes(p, Completion::counter(done)).ok());
    EXPECT_TRUE(agent.expect_imms(9, expected)) << "page " << page;
    wait_all(done, 1);
    EXPECT_EQ(done.errors, 0u);
    EXPECT_EQ(agent.hash(0, region), shadow.hash()) << "page " << page;
    EXPECT_EQ(agent.count(9), 0u);
  }
}

// Imms that arrive before anybody expects them are counted; an expectation registered after
// they arrived fires at once and consumes exactly n, leaving the rest.
TEST_P(EngineTest, ExpectationAfterArrivalStillFires) {
  AgentProcess agent(GetParam(), 4096);
  ASSERT_TRUE(agent.started());
  auto engine = make_engine();
  ASSERT_TRUE(engine);
  CompletionCounter done;
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(engine->submit_imm(77, agent.desc(), Completion::counter(done)).ok());
  wait_all(done, 10);
  EXPECT_EQ(done.errors, 0u);
  // Wait until all ten were counted with no expectation present.
  uint64_t seen = 0;
  for (int i = 0; i < 6000 && seen < 10; ++i) {
    seen = agent.count(77);
    if (seen < 10) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(seen, 10u);
  EXPECT_TRUE(agent.expect_imms(77, 6, std::chrono::milliseconds(100)));
  EXPECT_EQ(agent.count(77), 4u);
  EXPECT_TRUE(agent.expect_imms(77, 4, std::chrono::milliseconds(100)));
  EXPECT_EQ(agent.count(77), 0u);
}

// Routes: Pinned puts a large write on one domain (one imm), RoundRobin{2} on at most two.
TEST_P(EngineTest, RoutesDecideShardCounts) {
  const size_t region = 8 * kMiB;
  AgentProcess agent(GetParam(), region);
  ASSERT_TRUE(agent.started());
  auto engine = make_engine();
  ASSERT_TRUE(engine);
  SourceBuffer src(*engine, region, 14);
  Shadow shadow(region);
  CompletionCounter done;
  const uint32_t last = static_cast<uint32_t>(domains() - 1);
  WriteRequest pinned{src.reg.handle, 0, agent.desc(), 0, 4 * kMiB, 21, Pinned{last}};
  WriteRequest two{src.reg.handle, 4 * kMiB, agent.desc(), 4 * kMiB, 4 * kMiB, 22, RoundRobin{2}};
  EXPECT_EQ(imm_count_of(pinned, domains()), 1u);
  EXPECT_EQ(imm_count_of(two, domains()), std::min<size_t>(2, domains()));
  ASSERT_TRUE(engine->submit_write(pinned, Completion::counter(done)).ok());
  ASSERT_TRUE(engine->submit_write(two, Completion::counter(done)).ok());
  shadow.write(src, 0, 0, 8 * kMiB);
  EXPECT_TRUE(agent.expect_imms(21, imm_count_of(pinned, domains())));
  EXPECT_TRUE(agent.expect_imms(22, imm_count_of(two, domains())));
  wait_all(done, 2);
  EXPECT_EQ(done.errors, 0u);
  EXPECT_EQ(agent.hash(0, region), shadow.hash());
}

INSTANTIATE_TEST_SUITE_P(Matrix, EngineTest, ::testing::ValuesIn(provider_matrix()), matrix_name);

}  // namespace
}  // namespace fabric_lib::testing

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
  Outcomes out(5);  // one per case below; before the engine, which may call it until stopped
  std::vector<std::string> at_ok(5);  // the target's bytes of each write, read inside its Ok callback
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
  ASSERT_EQ(cases.size(), out.calls.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const uint32_t imm = static_cast<uint32_t>(100 + i);
    WriteRequest w{src.reg.handle, c.src_off, agent.desc(), c.dst_off, c.len, imm};
    const uint64_t expected = imm_count_of(w, domains());
    // Every provider of the matrix grants delivery-complete writes (docs/api.md, "What Ok
    // means"): when the write's Ok callback runs its bytes are at the target — read right there,
    // from the agent's memory, with no round trip that would give a late copy time to finish.
    ASSERT_TRUE(engine
                    ->submit_write(w, Completion::callback([&, i, c](const Status& s) {
                                     if (s.ok()) at_ok[i] = agent.hash_now(c.dst_off, c.len);
                                     out.record(i, s);
                                   }))
                    .ok());
    shadow.write(src, c.src_off, c.dst_off, c.len);
    ASSERT_TRUE(out.wait_for_request(i, bounds::kRequests)) << "size " << c.len;
    EXPECT_EQ(out.code(i), ErrorCode::kOk) << "size " << c.len;
    EXPECT_EQ(at_ok[i], hash_hex(src.bytes.data() + c.src_off, c.len)) << "bytes missing at the Ok, size " << c.len;
    // Exactly the imms imm_count_of() predicts: none more within the quiet interval.
    EXPECT_EQ(agent.expect_exactly(imm, expected), "ok") << "size " << c.len;
  }
  EXPECT_TRUE(out.all_ok());
  EXPECT_EQ(agent.hash(0, region), shadow.hash());
}

// A write without an imm completes Ok at the writer; with delivery-complete semantics the bytes
// are at the target by then, and a following imm-only request is counted once.
TEST_P(EngineTest, WriteWithoutImmThenImmOnly) {
  Outcomes out(2);
  std::string at_ok;  // the target's region, read inside the write's Ok callback
  AgentProcess agent(GetParam(), kMiB);
  ASSERT_TRUE(agent.started());
  auto engine = make_engine();
  ASSERT_TRUE(engine);
  SourceBuffer src(*engine, kMiB, 12);
  Shadow shadow(kMiB);
  ASSERT_TRUE(engine
                  ->submit_write({src.reg.handle, 0, agent.desc(), 512, 300000}, Completion::callback([&](const Status& s) {
                                   if (s.ok()) at_ok = agent.hash_now(0, kMiB);
                                   out.record(0, s);
                                 }))
                  .ok());
  shadow.write(src, 0, 512, 300000);
  ASSERT_TRUE(out.wait_for_request(0, bounds::kRequests));
  EXPECT_EQ(out.code(0), ErrorCode::kOk);
  EXPECT_EQ(at_ok, shadow.hash()) << "bytes missing at the Ok";  // with no imm to wait for
  ASSERT_TRUE(engine->submit_imm(55, agent.desc(), out.sink(1)).ok());
  EXPECT_TRUE(out.all_ok());
  EXPECT_EQ(agent.expect_exactly(55, kImmCountOfImmOnly), "ok");
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
    Outcomes out(1);
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
    ASSERT_TRUE(engine->submit_paged_writes(p, out.sink(0)).ok());
    ASSERT_TRUE(out.wait_all(bounds::kRequests)) << "page " << page;
    EXPECT_EQ(out.code(0), ErrorCode::kOk);
    EXPECT_EQ(agent.hash(0, region), shadow.hash()) << "page " << page;  // at the Ok (delivery-complete)
    EXPECT_EQ(agent.expect_exactly(9, expected), "ok") << "page " << page;
    EXPECT_TRUE(out.all_ok());
    expect_reordering_as_configured(*engine, &agent);  // 512 WRs: windows fill
  }
}

// Imms that arrive before anybody expects them are counted; an expectation registered after
// they arrived fires at once and consumes exactly n, leaving the rest.
TEST_P(EngineTest, ExpectationAfterArrivalStillFires) {
  Outcomes out(10);
  AgentProcess agent(GetParam(), 4096);
  ASSERT_TRUE(agent.started());
  auto engine = make_engine();
  ASSERT_TRUE(engine);
  for (size_t i = 0; i < 10; ++i) ASSERT_TRUE(engine->submit_imm(77, agent.desc(), out.sink(i)).ok());
  EXPECT_TRUE(out.all_ok());
  // Wait until all ten were counted with no expectation present, and no eleventh comes.
  EXPECT_TRUE(agent.wait_count(77, 10));
  EXPECT_EQ(agent.quiet(77, 10), "ok");
  EXPECT_TRUE(agent.expect_imms(77, 6, std::chrono::milliseconds(100)));
  EXPECT_EQ(agent.count(77), 4u);
  EXPECT_TRUE(agent.expect_imms(77, 4, std::chrono::milliseconds(100)));
  EXPECT_EQ(agent.quiet(77, 0), "ok");
}

// Routes: Pinned{last} puts a large write on that one domain (one WR, one imm), RoundRobin{2}
// on at most two; the engine's per-domain WR counts show which domains carried them.
TEST_P(EngineTest, RoutesDecideShardCounts) {
  const size_t region = 8 * kMiB;
  Outcomes out(2);
  AgentProcess agent(GetParam(), region);
  ASSERT_TRUE(agent.started());
  auto engine = make_engine();
  ASSERT_TRUE(engine);
  SourceBuffer src(*engine, region, 14);
  Shadow shadow(region);
  const uint32_t last = static_cast<uint32_t>(domains() - 1);
  WriteRequest pinned{src.reg.handle, 0, agent.desc(), 0, 4 * kMiB, 21, Pinned{last}};
  WriteRequest two{src.reg.handle, 4 * kMiB, agent.desc(), 4 * kMiB, 4 * kMiB, 22, RoundRobin{2}};
  EXPECT_EQ(imm_count_of(pinned, domains()), 1u);
  EXPECT_EQ(imm_count_of(two, domains()), std::min<size_t>(2, domains()));
  shadow.write(src, 0, 0, 8 * kMiB);

  // One at a time, so each one's WRs are told apart in the per-domain counts.
  auto posted = [&] { return engine->stats().wrs_posted_by_domain; };
  const std::vector<uint64_t> before = posted();
  ASSERT_EQ(before.size(), domains());
  ASSERT_TRUE(engine->submit_write(pinned, out.sink(0)).ok());
  ASSERT_TRUE(out.wait_for_request(0, bounds::kRequests));
  const std::vector<uint64_t> after_pinned = posted();
  for (size_t d = 0; d < domains(); ++d) {
    EXPECT_EQ(after_pinned[d] - before[d], d == last ? 1u : 0u) << "WRs of the Pinned{" << last << "} write on domain " << d;
  }
  EXPECT_EQ(agent.expect_exactly(21, 1), "ok");

  ASSERT_TRUE(engine->submit_write(two, out.sink(1)).ok());
  ASSERT_TRUE(out.wait_for_request(1, bounds::kRequests));
  const std::vector<uint64_t> after_two = posted();
  size_t used = 0, wrs = 0;
  for (size_t d = 0; d < domains(); ++d) {
    const uint64_t n = after_two[d] - after_pinned[d];
    EXPECT_LE(n, 1u) << "domain " << d;  // 2 MiB shards: one WR each
    used += n > 0;
    wrs += n;
  }
  EXPECT_EQ(used, std::min<size_t>(2, domains()));
  EXPECT_EQ(wrs, imm_count_of(two, domains()));
  EXPECT_EQ(agent.expect_exactly(22, imm_count_of(two, domains())), "ok");
  EXPECT_TRUE(out.all_ok());
  EXPECT_EQ(agent.hash(0, region), shadow.hash());
}

// Multi-WR requests in a burst (paged writes, sharded writes, imm-only requests), the traffic
// that fills the reordering wrapper's shuffle windows: each completes once, every byte lands,
// every imm value is counted exactly; on tcp_reordered the wrapper provably shuffled and held
// back, elsewhere it is off.
TEST_P(EngineTest, BurstOfMultiWrRequestsLandsExactly) {
  constexpr size_t kPaged = 16, kPages = 32, kPage = 4096, kArea = kPages * kPage;
  constexpr size_t kSharded = 16, kWrite = 512 * 1024, kImmOnly = 32;
  const size_t paged_bytes = kPaged * kArea;
  const size_t region = paged_bytes + kSharded * kWrite;
  Outcomes out(kPaged + kSharded + kImmOnly);
  AgentProcess agent(GetParam(), region);
  ASSERT_TRUE(agent.started());
  auto engine = make_engine();
  ASSERT_TRUE(engine);
  SourceBuffer src(*engine, region, 15);
  Shadow shadow(region);
  std::mt19937 rng(15);
  size_t next = 0;
  for (size_t i = 0; i < kPaged; ++i) {
    PagedWriteRequest p{src.reg.handle, agent.desc(), kPage, {}, {}, kPage, kPage, i * kArea, i * kArea, 300};
    p.src_pages.resize(kPages);
    std::iota(p.src_pages.begin(), p.src_pages.end(), 0);
    std::shuffle(p.src_pages.begin(), p.src_pages.end(), rng);
    p.dst_pages = p.src_pages;
    shadow.write(src, i * kArea, i * kArea, kArea);
    ASSERT_TRUE(engine->submit_paged_writes(std::move(p), out.sink(next++)).ok());
  }
  uint64_t sharded_imms = 0;
  for (size_t i = 0; i < kSharded; ++i) {
    const uint64_t off = paged_bytes + i * kWrite;
    WriteRequest w{src.reg.handle, off, agent.desc(), off, kWrite, 301};
    sharded_imms += imm_count_of(w, domains());
    shadow.write(src, off, off, kWrite);
    ASSERT_TRUE(engine->submit_write(w, out.sink(next++)).ok());
  }
  for (size_t i = 0; i < kImmOnly; ++i) ASSERT_TRUE(engine->submit_imm(302, agent.desc(), out.sink(next++)).ok());
  EXPECT_TRUE(out.all_ok());
  EXPECT_EQ(agent.hash(0, region), shadow.hash());
  EXPECT_EQ(agent.expect_exactly(300, kPaged * kPages), "ok");
  EXPECT_EQ(agent.expect_exactly(301, sharded_imms), "ok");
  EXPECT_EQ(agent.expect_exactly(302, kImmOnly * kImmCountOfImmOnly), "ok");
  expect_reordering_as_configured(*engine, &agent);
}

INSTANTIATE_TEST_SUITE_P(Matrix, EngineTest, ::testing::ValuesIn(provider_matrix()), matrix_name);

}  // namespace
}  // namespace fabric_lib::testing

// Bytes exact per layer and tail over real engines in separate processes: the decoder in this
// process, prefill ranks in agents; tcp, shm and tcp under the reordering wrapper, 1 and 4 domains.
#include "kv_fixture.h"

namespace fabric_lib::kv::testing {
namespace {

class KvTransfer : public ::testing::TestWithParam<HostConfig> {};

TEST_P(KvTransfer, PermutedPagesArriveExactWithTheirTailBothOrdersOfDispatchAndPrefill) {
  HostConfig c = GetParam();
  auto prefill = std::make_unique<KvAgent>(AgentRole::kPrefill, c);
  ASSERT_TRUE(prefill->started());
  DecodeHost decode(c);
  ASSERT_TRUE(decode.ok()) << decode.status().to_string();
  std::vector<std::unique_ptr<KvAgent>> ranks;
  ranks.push_back(std::move(prefill));
  KvAgent& p = *ranks[0];
  std::vector<uint32_t> pool = permuted_pages(c.num_pages, c.num_pages, 11);
  // a: dispatch first, prefill after; b: prefill first (pages wait in the prefiller), dispatch after.
  auto a = make_request("a", 87, c, 1, 0, 1000, 0, &pool);    // 6 pages, the last one partial
  auto b = make_request("b", 16 * 9, c, 2, 4096, 333, 0, &pool);
  ASSERT_EQ(p.call(add_command(a)), "ok");
  ASSERT_TRUE(decode.start(a, instance_of(ranks), kRequestTimeout).ok());
  ASSERT_EQ(p.call("prefill 0 a"), "ok");
  ASSERT_EQ(p.call(add_command(b)), "ok");
  ASSERT_EQ(p.call("prefill 0 b"), "ok");
  ASSERT_TRUE(decode.start(b, instance_of(ranks), kRequestTimeout).ok());
  auto done = decode.wait({"a", "b"}, kWait);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_TRUE(done["a"].ok()) << done["a"].to_string();
  EXPECT_TRUE(done["b"].ok()) << done["b"].to_string();
  EXPECT_EQ(decode.verify("a"), "ok");
  EXPECT_EQ(decode.verify("b"), "ok");
  EXPECT_TRUE(decode.untouched_pages_zero());
  EXPECT_TRUE(all_ok(p.call("wait_finished 2 10000"), 2));
  // Exactly the planned work: 3 layers x (K, V) x pages, one tail each.
  const std::string stats = p.call("stats");
  EXPECT_EQ(stat(stats, "pages"), 3u * 2 * (6 + 9)) << stats;
  EXPECT_EQ(stat(stats, "tails"), 2u);
  EXPECT_EQ(stat(stats, "completed"), stat(stats, "paged") + 2);
  EXPECT_EQ(decode.decoder().stats().active_requests, 0u);
  // The requests by state on both engines' MetricsRegistry (what the endpoint serves).
  EXPECT_EQ(kv_requests_metric(decode.engine(), "decoder", "started"), 2);
  EXPECT_EQ(kv_requests_metric(decode.engine(), "decoder", "succeeded"), 2);
  EXPECT_EQ(kv_requests_metric(decode.engine(), "decoder", "failed"), 0);
  EXPECT_EQ(stat(stats, "m_started"), 2u) << stats;
  EXPECT_EQ(stat(stats, "m_ok"), 2u) << stats;
  EXPECT_EQ(stat(stats, "m_failed"), 0u) << stats;
}

INSTANTIATE_TEST_SUITE_P(Matrix, KvTransfer, ::testing::ValuesIn(provider_matrix()),
                         [](const auto& info) { return info.param.name(); });

HostConfig tcp_config(size_t domains = 1) {
  HostConfig c;
  c.domains = domains;
  return c;
}

TEST(KvTransferShapes, ChunkedPrefillMovesTheSamePagesAndImms) {
  HostConfig c = tcp_config(2);
  c.reorder_seed = 77;
  c.num_pages = 96;
  std::vector<std::unique_ptr<KvAgent>> ranks;
  ranks.push_back(std::make_unique<KvAgent>(AgentRole::kPrefill, c));
  ASSERT_TRUE(ranks[0]->started());
  DecodeHost decode(c);
  ASSERT_TRUE(decode.ok());
  std::vector<uint32_t> pool = permuted_pages(c.num_pages, c.num_pages, 5);
  // 100 tokens = 7 pages; chunks of 32 (page aligned), 24 (not aligned) and 100 (one pass).
  const std::vector<std::pair<std::string, uint32_t>> runs = {{"c32", 32}, {"c24", 24}, {"c0", 0}};
  uint64_t last_pages = 0;
  for (size_t i = 0; i < runs.size(); ++i) {
    auto r = make_request(runs[i].first, 100, c, 10 + i, 512 * i, 512, 0, &pool);
    ASSERT_EQ(ranks[0]->call(add_command(r)), "ok");
    ASSERT_TRUE(decode.start(r, instance_of(ranks), kRequestTimeout).ok());
    ASSERT_EQ(ranks[0]->call("prefill " + std::to_string(runs[i].second) + " " + r.id), "ok");
    auto done = decode.wait({r.id}, kWait);
    ASSERT_TRUE(done[r.id].ok()) << runs[i].first << ": " << done[r.id].to_string();
    EXPECT_EQ(decode.verify(r.id), "ok") << runs[i].first;
    const uint64_t pages = stat(ranks[0]->call("stats"), "pages");
    EXPECT_EQ(pages - last_pages, 3u * 2 * 7) << "chunk " << runs[i].second << " changed the pages moved";
    last_pages = pages;
  }
  EXPECT_TRUE(decode.untouched_pages_zero());
}

TEST(KvTransferShapes, PrefixReuseMovesOnlyTheMissingPages) {
  HostConfig c = tcp_config();
  std::vector<std::unique_ptr<KvAgent>> ranks;
  ranks.push_back(std::make_unique<KvAgent>(AgentRole::kPrefill, c));
  ASSERT_TRUE(ranks[0]->started());
  DecodeHost decode(c);
  ASSERT_TRUE(decode.ok());
  auto r = make_request("prefix", 16 * 5 + 3, c, 3, 0, 100, /*first_page=*/2);  // 6 pages, 2 held already
  ASSERT_EQ(r.pages.size(), 4u);
  ASSERT_EQ(ranks[0]->call(add_command(r)), "ok");
  ASSERT_TRUE(decode.start(r, instance_of(ranks), kRequestTimeout).ok());
  ASSERT_EQ(ranks[0]->call("prefill 32 prefix"), "ok");  // chunked too
  auto done = decode.wait({"prefix"}, kWait);
  ASSERT_TRUE(done["prefix"].ok()) << done["prefix"].to_string();
  EXPECT_EQ(decode.verify("prefix"), "ok");
  EXPECT_TRUE(decode.untouched_pages_zero()) << "the prefix pages the decoder holds were written";
  EXPECT_EQ(stat(ranks[0]->call("stats"), "pages"), 3u * 2 * 4);
}

TEST(KvTransferShapes, SixtyFourConcurrentRequestsOfDifferentLengths) {
  HostConfig c = tcp_config(4);
  c.num_pages = 600;
  c.tail_area = 64 * 256;
  std::vector<std::unique_ptr<KvAgent>> ranks;
  ranks.push_back(std::make_unique<KvAgent>(AgentRole::kPrefill, c));
  ASSERT_TRUE(ranks[0]->started());
  DecodeHost decode(c);
  ASSERT_TRUE(decode.ok());
  std::vector<uint32_t> pool = permuted_pages(c.num_pages, c.num_pages, 9);
  std::vector<std::string> ids;
  std::string batch;
  uint64_t total_pages = 0;
  for (int i = 0; i < 64; ++i) {
    const uint32_t tokens = 1 + (i * 37) % 140;  // 1..140 tokens: 1..9 pages
    auto r = make_request("r" + std::to_string(i), tokens, c, 100 + i, 256 * i, 1 + i, 0, &pool);
    total_pages += r.pages.size();
    ASSERT_EQ(ranks[0]->call(add_command(r)), "ok");
    ASSERT_TRUE(decode.start(r, instance_of(ranks), kRequestTimeout).ok());
    ids.push_back(r.id);
    batch += (batch.empty() ? "" : ",") + r.id;
  }
  ASSERT_EQ(ranks[0]->call("prefill 48 " + batch), "ok");  // one batch, chunks of 48 tokens
  auto done = decode.wait(ids, kWait);
  ASSERT_EQ(done.size(), 64u);
  for (const std::string& id : ids) {
    EXPECT_TRUE(done[id].ok()) << id << ": " << done[id].to_string();
    EXPECT_EQ(decode.verify(id), "ok") << id;
  }
  EXPECT_TRUE(decode.untouched_pages_zero());
  EXPECT_EQ(stat(ranks[0]->call("stats"), "pages"), 3u * 2 * total_pages);
}

}  // namespace
}  // namespace fabric_lib::kv::testing

// Heterogeneous TP: prefill ranks in agent processes, decode ranks in this process (one engine
// each). Every decode rank must hold exactly its heads' K and V; the work posted must be what
// the plan says (no replica sent twice).
#include "kv_fixture.h"

namespace fabric_lib::kv::testing {
namespace {

struct TpCase {
  uint32_t p, d;
  AttentionKind kind = AttentionKind::kGqa;
  KvPacking prefill_packing = KvPacking::kSeparate;
  KvPacking decode_packing = KvPacking::kSeparate;
};

void run_tp(const TpCase& t) {
  HostConfig base;
  base.layout.kind = t.kind;
  base.layout.kv_heads = t.kind == AttentionKind::kMla ? 1 : 4;
  base.layout.head_dim = t.kind == AttentionKind::kMla ? 72 : 32;
  base.num_pages = 24;
  base.heartbeat_ms = 200;
  base.peer_timeout_ms = 3000;
  std::vector<std::unique_ptr<KvAgent>> prefill;
  for (uint32_t i = 0; i < t.p; ++i) {
    HostConfig c = base;
    c.rank = {i, t.p, t.prefill_packing};
    prefill.push_back(std::make_unique<KvAgent>(AgentRole::kPrefill, c));
    ASSERT_TRUE(prefill.back()->started());
  }
  std::vector<std::unique_ptr<DecodeHost>> decode;
  for (uint32_t j = 0; j < t.d; ++j) {
    HostConfig c = base;
    c.rank = {j, t.d, t.decode_packing};
    decode.push_back(std::make_unique<DecodeHost>(c));
    ASSERT_TRUE(decode.back()->ok()) << decode.back()->status().to_string();
  }
  const uint32_t tokens = 70, pages = pages_for_tokens(tokens, base.layout.page_tokens);
  const auto inst = instance_of(prefill, t.prefill_packing);
  uint64_t planned = 0;
  for (uint32_t j = 0; j < t.d; ++j) {
    auto r = make_request("tp", tokens, base, 40 + j, 0, 200);
    r.src_pages = permuted_pages(pages, base.num_pages, 1234);  // the prefill instance's page table
    ASSERT_TRUE(decode[j]->start(r, inst, kRequestTimeout).ok());
    for (uint32_t i = 0; i < t.p; ++i) {
      auto plan = plan_pair(base.layout, {i, t.p, t.prefill_packing}, {j, t.d, t.decode_packing});
      planned += work_requests_of_pair(base.layout, *plan, pages);
    }
  }
  auto r = make_request("tp", tokens, base, 0, 0, 200);
  r.src_pages = permuted_pages(pages, base.num_pages, 1234);
  for (auto& a : prefill) ASSERT_EQ(a->call(add_command(r) + " " + std::to_string(t.d)), "ok");
  for (auto& a : prefill) ASSERT_EQ(a->call("prefill 32 tp"), "ok");
  for (uint32_t j = 0; j < t.d; ++j) {
    auto done = decode[j]->wait({"tp"}, kWait);
    ASSERT_TRUE(done["tp"].ok()) << "decode rank " << j << ": " << done["tp"].to_string();
    EXPECT_EQ(decode[j]->verify("tp"), "ok") << "decode rank " << j;
    EXPECT_TRUE(decode[j]->untouched_pages_zero());
  }
  uint64_t posted = 0, tails = 0;
  for (auto& a : prefill) {
    EXPECT_TRUE(all_ok(a->call("wait_finished 1 10000"), 1));
    const std::string s = a->call("stats");
    posted += stat(s, "pages");
    tails += stat(s, "tails");
  }
  EXPECT_EQ(posted, planned) << "WRs posted differ from the plan";
  EXPECT_EQ(tails, t.d) << "one tail per decode rank";
  if (t.kind == AttentionKind::kMla) {
    EXPECT_EQ(posted, uint64_t(t.d) * base.layout.num_layers * pages) << "MLA replicas sent more than once";
  }
}

TEST(KvTensorParallel, Prefill2Decode1) { run_tp({2, 1}); }
TEST(KvTensorParallel, Prefill1Decode2) { run_tp({1, 2}); }
TEST(KvTensorParallel, Prefill4Decode2) { run_tp({4, 2}); }
TEST(KvTensorParallel, Prefill8Decode2HeadsReplicated) { run_tp({8, 2}); }
TEST(KvTensorParallel, Prefill2Decode4StackedToSeparate) { run_tp({2, 4, AttentionKind::kGqa, KvPacking::kStacked, KvPacking::kSeparate}); }
TEST(KvTensorParallel, MlaPrefill2Decode2SentOncePerDestination) { run_tp({2, 2, AttentionKind::kMla}); }
TEST(KvTensorParallel, MlaPrefill2Decode1SentOnce) { run_tp({2, 1, AttentionKind::kMla}); }

}  // namespace
}  // namespace fabric_lib::kv::testing

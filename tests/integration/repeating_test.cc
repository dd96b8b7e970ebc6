// Repeating imm expectations (ImmCounter::expect_every) at an agent, over the whole provider
// matrix: imms that arrived before the registration count toward the first rounds, rounds keep
// firing across many arrivals from every request form, each consuming exactly n, and release()
// ends the expectation once with nothing left counted.
#include <random>

#include "integration/engine_fixture.h"

namespace fabric_lib::testing {
namespace {

using RepeatingTest = EngineTest;

// every_status: rounds(imm), count(imm), sink rounds, ends, in order, end code.
struct EveryStatus {
  uint64_t api_rounds = 0, count = 0, sink_rounds = 0, ends = 0;
  bool in_order = false;
  std::string end_code;
};
EveryStatus every_status(AgentProcess& agent, uint32_t imm) {
  const std::string reply = agent.call("every_status " + std::to_string(imm));
  auto w = tools::split_words(reply);
  EveryStatus s;
  if (w.size() != 6 || w[0] == "error") {
    ADD_FAILURE() << "every_status: " << reply;
    return s;
  }
  s = {std::stoull(w[0]), std::stoull(w[1]), std::stoull(w[2]), std::stoull(w[3]), w[4] == "1", w[5]};
  return s;
}

// Sends exactly `imms` imms of `imm` to the agent, mixing the request forms: sharded writes,
// paged writes, imm-only requests and prepared paged writes, in chunks not aligned to any round.
void send_imms(TransferEngine& engine, const SourceBuffer& src, const MrDesc& dst, const PreparedPagedWrites& prepared,
               uint32_t imm, uint64_t imms, size_t domains, std::mt19937& rng) {
  CompletionCounter done;
  uint64_t requests = 0;
  while (imms > 0) {
    Result<TransferId> id = fabric_lib::internal_error("unset");
    switch (rng() % 4) {
      case 0: {  // a write sharded over the domains (one imm per shard)
        const WriteRequest w{src.reg.handle, 0, dst, 0, 256 << 10, imm};
        const uint64_t n = imm_count_of(w, domains);
        if (n > imms) continue;
        id = engine.submit_write(w, Completion::counter(done));
        imms -= n;
        break;
      }
      case 1: {
        id = engine.submit_imm(imm, dst, Completion::counter(done));
        imms -= kImmCountOfImmOnly;
        break;
      }
      default: {  // paged, plain or prepared (one imm per page)
        const uint32_t pages = static_cast<uint32_t>(std::min<uint64_t>(imms, 1 + rng() % 7));
        std::vector<uint32_t> src_pages(pages), dst_pages(pages);
        for (uint32_t p = 0; p < pages; ++p) src_pages[p] = dst_pages[p] = p;
        if (rng() % 2) {
          id = engine.submit_prepared(prepared, src_pages, dst_pages, imm, Completion::counter(done));
        } else {
          id = engine.submit_paged_writes({src.reg.handle, dst, 4096, src_pages, dst_pages, 4096, 4096, 0, 0, imm},
                                          Completion::counter(done));
        }
        imms -= imm_count_of_paged_writes(pages);
        break;
      }
    }
    ASSERT_TRUE(id.ok()) << id.status().to_string();
    ++requests;
  }
  wait_all(done, requests);
  ASSERT_EQ(done.errors, 0u);
}

TEST_P(RepeatingTest, EarlyArrivalsThenManyRoundsThenRelease) {
  const size_t region = 1 << 20;
  AgentProcess agent(GetParam(), region);
  ASSERT_TRUE(agent.started());
  auto engine = make_engine();
  ASSERT_TRUE(engine);
  SourceBuffer src(*engine, region, 51);
  StopEngineFirst stop_first(engine.get());
  PagedWriteTemplate t{src.reg.handle, agent.desc(), 4096, 4096, 4096, 0, 0, 8, 8};
  Result<PreparedPagedWrites> prepared = engine->prepare_paged_writes(t);
  ASSERT_TRUE(prepared.ok()) << prepared.status().to_string();
  std::mt19937 rng(61);

  for (const char* sink : {"counter", "callback", "flag"}) {
    SCOPED_TRACE(sink);
    const uint32_t imm = std::string(sink) == "counter" ? 700 : std::string(sink) == "callback" ? 701 : 702;
    constexpr uint64_t kN = 13;
    // 2.5 rounds arrive before anybody expects them; they stay counted.
    send_imms(*engine, src, agent.desc(), *prepared, imm, 2 * kN + kN / 2, domains(), rng);
    EXPECT_EQ(agent.call("wait_count " + std::to_string(imm) + " " + std::to_string(2 * kN + kN / 2) + " 60000"),
              "ok " + std::to_string(2 * kN + kN / 2));
    // Registering fires the two complete rounds at once and keeps the rest.
    ASSERT_EQ(agent.call("every " + std::to_string(imm) + " " + std::to_string(kN) + " " + sink), "ok");
    EXPECT_EQ(agent.call("wait_rounds " + std::to_string(imm) + " 2 60000"), "ok");
    EveryStatus s = every_status(agent, imm);
    EXPECT_EQ(s.api_rounds, 2u);
    EXPECT_EQ(s.count, kN / 2);
    EXPECT_EQ(s.ends, 0u);
    // A second expectation of the value is refused while this one runs.
    EXPECT_EQ(agent.call("every " + std::to_string(imm) + " 1 counter").rfind("error", 0), 0u);

    // Many more rounds, from every request form; the total is a whole number of rounds.
    constexpr uint64_t kRounds = 60;
    send_imms(*engine, src, agent.desc(), *prepared, imm, kRounds * kN - kN / 2, domains(), rng);
    EXPECT_EQ(agent.call("wait_rounds " + std::to_string(imm) + " " + std::to_string(2 + kRounds) + " 60000"), "ok");
    // ... and no extra round or count shows up after it (a short bounded check).
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    s = every_status(agent, imm);
    EXPECT_EQ(s.api_rounds, 2 + kRounds);
    EXPECT_EQ(s.sink_rounds, 2 + kRounds);
    EXPECT_EQ(s.count, 0u);  // residual: every imm was consumed by a round
    EXPECT_TRUE(s.in_order);

    // release() ends it once, with Cancelled; later imms are counted and fire nothing.
    ASSERT_EQ(agent.call("release " + std::to_string(imm)), "ok");
    send_imms(*engine, src, agent.desc(), *prepared, imm, 3, domains(), rng);
    EXPECT_EQ(agent.call("wait_count " + std::to_string(imm) + " 3 60000"), "ok 3");
    // The end reaches a callback sink on the callback thread, after release() returned: wait
    // for it (bounded), then check that it came once.
    s = every_status(agent, imm);
    for (int i = 0; i < 500 && s.ends == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      s = every_status(agent, imm);
    }
    EXPECT_EQ(s.api_rounds, 0u);
    EXPECT_EQ(s.ends, 1u);
    if (std::string(sink) == "callback") {
      EXPECT_EQ(s.end_code, "cancelled");
      EXPECT_TRUE(s.in_order) << "the end must report the rounds fired";
      EXPECT_EQ(s.sink_rounds, 2 + kRounds);
    }
    ASSERT_EQ(agent.call("release " + std::to_string(imm)), "ok");
  }
}

// n = 1 is a per-imm callback: 2000 imms, 2000 rounds, in order.
TEST_P(RepeatingTest, EveryImmIsARound) {
  AgentProcess agent(GetParam(), 1 << 20);
  ASSERT_TRUE(agent.started());
  auto engine = make_engine();
  ASSERT_TRUE(engine);
  SourceBuffer src(*engine, 1 << 20, 52);
  StopEngineFirst stop_first(engine.get());
  PagedWriteTemplate t{src.reg.handle, agent.desc(), 64, 64, 64, 0, 0, 64, 64};
  Result<PreparedPagedWrites> prepared = engine->prepare_paged_writes(t);
  ASSERT_TRUE(prepared.ok()) << prepared.status().to_string();
  ASSERT_EQ(agent.call("every 710 1 callback"), "ok");
  std::vector<uint32_t> pages(40);
  for (uint32_t p = 0; p < pages.size(); ++p) pages[p] = p;
  CompletionCounter done;
  constexpr size_t kSubmits = 50;
  for (size_t i = 0; i < kSubmits; ++i) {
    ASSERT_TRUE(engine->submit_prepared(*prepared, pages, pages, 710, Completion::counter(done)).ok());
  }
  wait_all(done, kSubmits);
  EXPECT_EQ(done.errors, 0u);
  EXPECT_EQ(agent.call("wait_rounds 710 2000 60000"), "ok");
  EveryStatus s = every_status(agent, 710);
  EXPECT_EQ(s.api_rounds, 2000u);
  EXPECT_EQ(s.sink_rounds, 2000u);
  EXPECT_EQ(s.count, 0u);
  EXPECT_TRUE(s.in_order);
}

INSTANTIATE_TEST_SUITE_P(Matrix, RepeatingTest, ::testing::ValuesIn(provider_matrix()), matrix_name);

}  // namespace
}  // namespace fabric_lib::testing

// Two-sided messages in both directions with bouncing receive buffers.
#include <condition_variable>
#include <mutex>
#include <set>

#include "integration/engine_fixture.h"

namespace fabric_lib::testing {
namespace {

using SendRecvTest = EngineTest;

// Messages of many sizes (0 B to 64 KiB) arrive whole, each exactly once, through fewer
// receive buffers than messages (so buffers are re-posted), and replies come back.
TEST_P(SendRecvTest, MessagesBothWays) {
  const std::vector<size_t> sizes = {0, 1, 63, 64, 4096, 4097, 65536};
  const size_t rounds = 6;
  const size_t total = rounds * sizes.size();
  Outcomes out(total);  // before the engine, which may call it until stopped
  std::mutex mu;        // the other direction's receive callback (before the engine too)
  std::condition_variable arrived;
  std::multiset<std::string> got;
  AgentProcess agent(GetParam(), 4096);
  ASSERT_TRUE(agent.started());
  ASSERT_EQ(agent.call("recvs 8 65536"), "ok");
  auto engine = make_engine();
  ASSERT_TRUE(engine);

  std::multiset<std::string> sent;
  uint64_t seed = 1000;
  for (size_t r = 0; r < rounds; ++r) {
    for (size_t len : sizes) {
      std::vector<uint8_t> m(len);
      tools::fill_pattern(m.data(), len, seed);
      sent.insert(message_hash(seed, len));
      ASSERT_TRUE(engine->submit_send(agent.address(), m, out.sink(seed - 1000)).ok());
      ++seed;
    }
  }
  EXPECT_TRUE(out.all_ok());
  auto words = tools::split_words(agent.call("messages " + std::to_string(total) + " " + std::to_string(bounds::kRequests.count())));
  ASSERT_FALSE(words.empty());
  EXPECT_EQ(words[0], "ok");
  std::this_thread::sleep_for(bounds::kQuiet);  // then no message more (a duplicate) may have come
  words = tools::split_words(agent.call("messages " + std::to_string(total) + " 0"));
  ASSERT_FALSE(words.empty());
  std::multiset<std::string> received(words.begin() + 1, words.end());
  EXPECT_EQ(received, sent);  // unordered transport: compare as multisets (a duplicate is an extra entry)

  // The other direction: the agent sends to us (and checks each send completed exactly once).
  ASSERT_TRUE(engine
                  ->post_recvs(4, 4096,
                               [&](std::span<const uint8_t> m) {
                                 std::lock_guard lock(mu);
                                 got.insert(hash_hex(m.data(), m.size()) + ":" + std::to_string(m.size()));
                                 arrived.notify_all();
                               })
                  .ok());
  EXPECT_EQ(agent.call("send " + engine->main_address().to_hex() + " 20 3000 5000", bounds::kRequests + bounds::kAgentCall),
            "ok");
  std::multiset<std::string> expected;
  for (int i = 0; i < 20; ++i) expected.insert(message_hash(5000 + i, 3000));
  std::unique_lock lock(mu);
  EXPECT_TRUE(arrived.wait_for(lock, bounds::kRequests, [&] { return got.size() >= expected.size(); }));
  EXPECT_FALSE(arrived.wait_for(lock, bounds::kQuiet, [&] { return got.size() > expected.size(); }))
      << "a message arrived twice";
  EXPECT_EQ(got, expected);
}

// A message larger than max_message_bytes is refused up front.
TEST_P(SendRecvTest, OversizedMessageIsRefused) {
  AgentProcess agent(GetParam(), 4096);
  ASSERT_TRUE(agent.started());
  auto engine = GetParam().builder().max_message_bytes(1024).build();
  ASSERT_TRUE(engine.ok());
  std::vector<uint8_t> m(1025);
  auto id = (*engine)->submit_send(agent.address(), m, Completion());
  EXPECT_EQ(id.status().code(), ErrorCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Matrix, SendRecvTest, ::testing::ValuesIn(provider_matrix()), matrix_name);

}  // namespace
}  // namespace fabric_lib::testing

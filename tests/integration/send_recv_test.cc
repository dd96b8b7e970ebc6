// Two-sided messages in both directions with bouncing receive buffers.
#include <mutex>

#include "integration/engine_fixture.h"

namespace fabric_lib::testing {
namespace {

using SendRecvTest = EngineTest;

std::string message_hash(uint64_t seed, size_t len) {
  std::vector<uint8_t> m(len);
  tools::fill_pattern(m.data(), len, seed);
  return hash_hex(m.data(), len) + ":" + std::to_string(len);
}

// Messages of many sizes (0 B to 64 KiB) arrive whole, each exactly once, through fewer
// receive buffers than messages (so buffers are re-posted), and replies come back.
TEST_P(SendRecvTest, MessagesBothWays) {
  AgentProcess agent(GetParam(), 4096);
  ASSERT_TRUE(agent.started());
  ASSERT_EQ(agent.call("recvs 8 65536"), "ok");
  auto engine = make_engine();
  ASSERT_TRUE(engine);

  const std::vector<size_t> sizes = {0, 1, 63, 64, 4096, 4097, 65536};
  const size_t rounds = 6;
  std::multiset<std::string> sent;
  CompletionCounter done;
  uint64_t seed = 1000;
  for (size_t r = 0; r < rounds; ++r) {
    for (size_t len : sizes) {
      std::vector<uint8_t> m(len);
      tools::fill_pattern(m.data(), len, seed);
      sent.insert(message_hash(seed, len));
      ASSERT_TRUE(engine->submit_send(agent.address(), m, Completion::counter(done)).ok());
      ++seed;
    }
  }
  const size_t total = rounds * sizes.size();
  wait_all(done, total);
  EXPECT_EQ(done.errors, 0u);
  auto words = tools::split_words(agent.call("messages " + std::to_string(total) + " 60000"));
  ASSERT_FALSE(words.empty());
  EXPECT_EQ(words[0], "ok");
  std::multiset<std::string> received(words.begin() + 1, words.end());
  EXPECT_EQ(received, sent);  // unordered transport: compare as multisets

  // The other direction: the agent sends to us.
  std::mutex mu;
  std::multiset<std::string> got;
  ASSERT_TRUE(engine
                  ->post_recvs(4, 4096,
                               [&](std::span<const uint8_t> m) {
                                 std::lock_guard lock(mu);
                                 got.insert(hash_hex(m.data(), m.size()) + ":" + std::to_string(m.size()));
                               })
                  .ok());
  EXPECT_EQ(agent.call("send " + engine->main_address().to_hex() + " 20 3000 5000"), "ok");
  std::multiset<std::string> expected;
  for (int i = 0; i < 20; ++i) expected.insert(message_hash(5000 + i, 3000));
  for (int i = 0; i < 2000; ++i) {
    {
      std::lock_guard lock(mu);
      if (got.size() >= expected.size()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::lock_guard lock(mu);
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

// Two-sided messages without copies, over the whole provider matrix: sends straight from a
// registered region (reused only once its send completed, so the receiver sees the bytes as they
// were at submit) and receives into the caller's registered region (each message handed over where
// it landed, its slot reposted after the callback).
#include <mutex>
#include <set>

#include "integration/engine_fixture.h"

namespace fabric_lib::testing {
namespace {

using ZeroCopyTest = EngineTest;

// kSlots sends in flight from kSlots places of one registered region; each completion refills its
// place with the next message and sends it again (from the callback). Every message arrives whole
// and exactly once, as it was when it was submitted.
TEST_P(ZeroCopyTest, SendsFromRegisteredMemoryReusedAfterCompletion) {
  constexpr size_t kSlots = 4, kMessages = 400;
  const std::vector<size_t> sizes = {1, 64, 1000, 4096, 65536};
  const size_t slot_bytes = 65536;
  AgentProcess agent(GetParam(), 4096);
  ASSERT_TRUE(agent.started());
  ASSERT_EQ(agent.call("recvs 16 65536"), "ok");
  std::mutex mu;  // what the completions touch outlives the engine (stop_first below)
  std::multiset<std::string> sent;
  size_t next = 0, finished = 0, errors = 0;
  std::condition_variable cv;
  auto engine = make_engine();
  ASSERT_TRUE(engine);
  SourceBuffer src(*engine, kSlots * slot_bytes, 0);
  // Fills place `slot` with message `i` and sends it; called again from the completion.
  std::function<void(size_t, size_t)> send = [&](size_t slot, size_t i) {
    const size_t len = sizes[i % sizes.size()];
    uint8_t* place = src.bytes.data() + slot * slot_bytes;
    tools::fill_pattern(place, len, 9000 + i);
    {
      std::lock_guard lock(mu);
      sent.insert(message_hash(9000 + i, len));
    }
    auto id = engine->submit_send(agent.address(), src.reg.handle, slot * slot_bytes, len,
                                  Completion::callback([&, slot](const Status& s) {
                                    // The place is ours again: scribble over it before reusing it.
                                    std::memset(src.bytes.data() + slot * slot_bytes, 0xEE, slot_bytes);
                                    size_t mine = 0;
                                    {
                                      std::lock_guard lock(mu);
                                      ++finished;
                                      errors += !s.ok();
                                      mine = next < kMessages ? next++ : kMessages;
                                      cv.notify_all();
                                    }
                                    if (mine < kMessages) send(slot, mine);
                                  }));
    if (!id.ok()) {
      std::lock_guard lock(mu);
      ADD_FAILURE() << id.status().to_string();
      finished = kMessages;  // end the wait
      cv.notify_all();
    }
  };
  StopEngineFirst stop_first(engine.get());
  {
    std::unique_lock lock(mu);
    next = kSlots;
  }
  for (size_t s = 0; s < kSlots; ++s) send(s, s);
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(120), [&] { return finished >= kMessages; }))
        << finished << " of " << kMessages;
    EXPECT_EQ(errors, 0u);
  }
  auto words = tools::split_words(agent.call("messages " + std::to_string(kMessages) + " 60000"));
  ASSERT_FALSE(words.empty());
  EXPECT_EQ(words[0], "ok");
  std::multiset<std::string> received(words.begin() + 1, words.end());
  std::lock_guard lock(mu);
  EXPECT_EQ(received, sent);
}

// Messages (copied and zero-copy sends, 0 B to a full slot) land in the agent's own registered
// region, inside the slots it posted, whole; there are fewer slots than messages, so slots are
// reposted. The other way, the agent's zero-copy sends land in slots of our region.
TEST_P(ZeroCopyTest, ReceivesIntoCallerRegisteredBuffers) {
  constexpr size_t kSlot = 8192, kSlotCount = 6, kOffset = 4096;
  AgentProcess agent(GetParam(), kOffset + kSlot * kSlotCount);
  ASSERT_TRUE(agent.started());
  ASSERT_EQ(agent.call("recvs_into " + std::to_string(kOffset) + " " + std::to_string(kSlot) + " " +
                       std::to_string(kSlotCount)),
            "ok");
  std::mutex mu;  // our receive callback's state outlives the engine
  std::multiset<std::string> got;
  size_t misplaced = 0;
  auto engine = make_engine();
  ASSERT_TRUE(engine);
  SourceBuffer src(*engine, kSlot, 0);
  constexpr size_t kOurSlot = 4096, kOurSlots = 3, kOurOffset = 512;
  SourceBuffer inbox(*engine, kOurOffset + kOurSlot * kOurSlots, 0);
  StopEngineFirst stop_first(engine.get());

  std::multiset<std::string> sent;
  CompletionCounter done;
  const std::vector<size_t> sizes = {0, 1, 100, 4096, kSlot};
  constexpr size_t kRounds = 8;
  uint64_t seed = 300;
  size_t requests = 0;
  for (size_t r = 0; r < kRounds; ++r) {
    for (size_t len : sizes) {
      std::vector<uint8_t> m(len);
      tools::fill_pattern(m.data(), len, seed);
      sent.insert(message_hash(seed, len));
      if (r % 2 == 0) {
        ASSERT_TRUE(engine->submit_send(agent.address(), m, Completion::counter(done)).ok());
        ++requests;
      } else {  // zero-copy: the source must stay unchanged until done
        if (len > 0) std::memcpy(src.bytes.data(), m.data(), len);  // an empty vector's data() may be null
        ASSERT_TRUE(engine->submit_send(agent.address(), src.reg.handle, 0, len, Completion::counter(done)).ok());
        ++requests;
        wait_all(done, requests);
      }
      ++seed;
    }
  }
  wait_all(done, requests);
  EXPECT_EQ(done.errors, 0u);
  auto words = tools::split_words(agent.call("messages " + std::to_string(requests) + " 60000"));
  ASSERT_FALSE(words.empty());
  EXPECT_EQ(words[0], "ok");
  EXPECT_EQ(std::multiset<std::string>(words.begin() + 1, words.end()), sent);
  EXPECT_EQ(agent.call("placement"), "0");

  // The other way: into a region of ours, from the agent's region without a copy.
  const uint8_t* base = inbox.bytes.data() + kOurOffset;
  ASSERT_TRUE(engine
                  ->post_recvs_into(inbox.reg.handle, kOurOffset, kOurSlot, kOurSlots,
                                    [&](std::span<const uint8_t> m) {
                                      std::lock_guard lock(mu);
                                      const bool inside = m.data() >= base &&
                                                          m.data() + m.size() <= base + kOurSlot * kOurSlots &&
                                                          (m.data() - base) % kOurSlot == 0;
                                      misplaced += !inside;
                                      got.insert(hash_hex(m.data(), m.size()) + ":" + std::to_string(m.size()));
                                    })
                  .ok());
  constexpr size_t kTheirs = 12;
  EXPECT_EQ(agent.call("send_from " + engine->main_address().to_hex() + " " + std::to_string(kTheirs) + " 3000 7000 0"),
            "ok");
  std::multiset<std::string> expected;
  for (size_t i = 0; i < kTheirs; ++i) expected.insert(message_hash(7000 + i, 3000));
  for (int i = 0; i < 12000; ++i) {  // bounded wait for the callbacks (their sends have completed)
    {
      std::lock_guard lock(mu);
      if (got.size() >= expected.size()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::lock_guard lock(mu);
  EXPECT_EQ(got, expected);
  EXPECT_EQ(misplaced, 0u);
}

// Registered-memory sends and receives refuse what they cannot do, synchronously.
TEST_P(ZeroCopyTest, BadRegionsAreRefused) {
  AgentProcess agent(GetParam(), 4096);
  ASSERT_TRUE(agent.started());
  auto engine = GetParam().builder().max_message_bytes(4096).build();
  ASSERT_TRUE(engine.ok());
  SourceBuffer src(**engine, 8192, 1);
  StopEngineFirst stop_first(engine->get());
  TransferEngine& e = **engine;
  auto code = [](auto r) { return r.status().code(); };
  EXPECT_EQ(code(e.submit_send(agent.address(), MrHandle{424242}, 0, 16, Completion())), ErrorCode::kNotFound);
  EXPECT_EQ(code(e.submit_send(agent.address(), src.reg.handle, 8000, 500, Completion())), ErrorCode::kOutOfRange);
  EXPECT_EQ(code(e.submit_send(agent.address(), src.reg.handle, 0, 4097, Completion())), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code(e.submit_send(DomainAddress(), src.reg.handle, 0, 16, Completion())), ErrorCode::kInvalidArgument);
  auto recv = [](std::span<const uint8_t>) {};
  EXPECT_EQ(e.post_recvs_into(src.reg.handle, 0, 4096, 3, recv).code(), ErrorCode::kOutOfRange);
  EXPECT_EQ(e.post_recvs_into(src.reg.handle, 0, 0, 1, recv).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(e.post_recvs_into(src.reg.handle, 0, 4096, 0, recv).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(e.post_recvs_into(src.reg.handle, 0, 4096, 1, RecvCallback()).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(e.post_recvs_into(MrHandle{424242}, 0, 4096, 1, recv).code(), ErrorCode::kNotFound);
  EXPECT_EQ(e.stats().requests_submitted, 0u);
}

INSTANTIATE_TEST_SUITE_P(Matrix, ZeroCopyTest, ::testing::ValuesIn(provider_matrix()), matrix_name);

}  // namespace
}  // namespace fabric_lib::testing

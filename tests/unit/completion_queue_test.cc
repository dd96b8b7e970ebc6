// Completion::queue: finished operations land in a CompletionQueue the caller drains on its own
// thread — each exactly once, with its tag and status; nothing is left behind.
#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <thread>
#include <vector>

#include "core/completion_delivery.h"
#include "fabric_lib/fabric_lib.h"

namespace fabric_lib {
namespace {

TEST(CompletionQueue, DeliversTagAndStatusOnce) {
  CompletionQueue q;
  Completion ok = Completion::queue(q, 7);
  Completion bad = Completion::queue(q, 8);
  CompletionDelivery::deliver_inline(ok, ok_status());
  CompletionDelivery::deliver_inline(bad, cancelled("x"));
  CompletionQueue::Entry e[4];
  ASSERT_EQ(q.poll(e, 4), 2u);
  EXPECT_EQ(e[0].tag, 7u);
  EXPECT_TRUE(e[0].status.ok());
  EXPECT_EQ(e[1].tag, 8u);
  EXPECT_EQ(e[1].status.code(), ErrorCode::kCancelled);
  EXPECT_EQ(q.poll(e, 4), 0u);
}

// Real writes between two engines in this process (tcp over loopback): every request's tag comes
// back exactly once, and nothing more follows.
TEST(CompletionQueue, EveryWriteComesBackOnceThroughAnEngine) {
  auto target = TransferEngineBuilder().provider("tcp").interfaces({"lo"}).domains_per_group(2).build();
  auto source = TransferEngineBuilder().provider("tcp").interfaces({"lo"}).domains_per_group(2).build();
  ASSERT_TRUE(target.ok() && source.ok());
  std::vector<uint8_t> inbox(1 << 20, 0), data(1 << 20, 3);
  auto dst = (*target)->register_memory(inbox.data(), inbox.size(), Access::kRemoteWrite);
  auto src = (*source)->register_memory(data.data(), data.size(), Access::kLocalOnly);
  ASSERT_TRUE(dst.ok() && src.ok());
  CompletionQueue q;
  constexpr uint64_t kWrites = 500;
  for (uint64_t i = 0; i < kWrites; ++i) {
    const uint64_t off = (i * 4096) % data.size();
    auto id = (*source)->submit_write({src->handle, off, dst->desc, off, 4096}, Completion::queue(q, 1000 + i));
    ASSERT_TRUE(id.ok()) << id.status().to_string();
  }
  std::set<uint64_t> seen;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  CompletionQueue::Entry e[64];
  while (seen.size() < kWrites && std::chrono::steady_clock::now() < deadline) {
    const size_t n = q.poll(e, 64);
    for (size_t i = 0; i < n; ++i) {
      EXPECT_TRUE(e[i].status.ok()) << e[i].status.to_string();
      EXPECT_TRUE(seen.insert(e[i].tag).second) << "tag " << e[i].tag << " twice";
    }
    if (n == 0) std::this_thread::yield();
  }
  EXPECT_EQ(seen.size(), kWrites);
  EXPECT_EQ(*seen.begin(), 1000u);
  EXPECT_EQ(*seen.rbegin(), 1000 + kWrites - 1);
  // The engine holds no more completions for this queue: stopping it delivers nothing more.
  ASSERT_TRUE((*source)->stop().ok());
  EXPECT_EQ(q.poll(e, 64), 0u);
}

}  // namespace
}  // namespace fabric_lib

// Submitters racing stop(), end to end: every submit the engine accepted completes exactly once,
// before stop() returns, every other one is refused with Stopped, and requests_submitted counts
// exactly the accepted — for threads that count on stripes of their own and for threads beyond
// base/thread_slot.h's limit, which share stripes (core/submit_gate.h). (The gate's handshake
// itself, whose window is a few hundred ns here, is proven by submit_gate_test.cc.)
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/thread_slot.h"
#include "fabric_lib/fabric_lib.h"

namespace fabric_lib {
namespace {

using namespace std::chrono_literals;

struct Tally {
  std::atomic<uint64_t> accepted{0}, refused{0}, wrong_refusal{0}, completed{0};
  std::mutex mu;
  std::string wrong;  // the first refusal other than Stopped
};

// `threads` submitters write 4 KiB pieces until the engine refuses them; stop() comes once
// `accepted_first` submits were accepted (waited for, bounded). Checks the promises above.
void race_stop(size_t threads, uint64_t accepted_first, bool expect_own_stripes) {
  std::vector<uint8_t> inbox(1 << 20, 0), data(1 << 20, 7);
  auto target = TransferEngineBuilder().provider("tcp").interfaces({"lo"}).domains_per_group(2).build();
  auto source = TransferEngineBuilder().provider("tcp").interfaces({"lo"}).domains_per_group(2).build();
  ASSERT_TRUE(target.ok() && source.ok());
  auto dst = (*target)->register_memory(inbox.data(), inbox.size(), Access::kRemoteWrite);
  auto src = (*source)->register_memory(data.data(), data.size(), Access::kLocalOnly);
  ASSERT_TRUE(dst.ok() && src.ok());
  TransferEngine& engine = **source;
  Tally tally;
  std::atomic<size_t> with_own_slot{0};
  std::vector<std::thread> submitters;
  for (size_t t = 0; t < threads; ++t) {
    submitters.emplace_back([&, t] {
      if (thread_slot() >= 0) with_own_slot.fetch_add(1);
      for (uint64_t i = 0;; ++i) {
        const uint64_t off = ((t * 64 + i) % 256) * 4096;
        auto id = engine.submit_write({src->handle, off, dst->desc, off, 4096},
                                      Completion::inline_callback([&](const Status&) { tally.completed.fetch_add(1); }));
        if (id.ok()) {
          tally.accepted.fetch_add(1);
          continue;
        }
        tally.refused.fetch_add(1);
        if (id.status().code() != ErrorCode::kStopped) {
          tally.wrong_refusal.fetch_add(1);
          std::lock_guard lock(tally.mu);
          if (tally.wrong.empty()) tally.wrong = id.status().to_string();
        }
        return;
      }
    });
  }
  const auto give_up = std::chrono::steady_clock::now() + 10s;  // bounded: never a hang
  while (tally.accepted.load() < accepted_first && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::yield();
  }
  EXPECT_GE(tally.accepted.load(), accepted_first) << "the submitters did not get going";
  ASSERT_TRUE(engine.stop().ok());
  const uint64_t completed_at_stop = tally.completed.load();
  for (std::thread& s : submitters) s.join();
  EXPECT_EQ(with_own_slot.load(), expect_own_stripes ? threads : 0);
  EXPECT_GT(tally.accepted.load(), 0u);
  EXPECT_EQ(tally.refused.load(), threads);
  EXPECT_EQ(tally.wrong_refusal.load(), 0u) << tally.wrong;
  // Accepted before stop() cleared accepting_, or refused: none slipped past it into a stopped worker.
  EXPECT_EQ(completed_at_stop, tally.accepted.load());
  EXPECT_EQ(tally.completed.load(), tally.accepted.load());
  EXPECT_EQ(engine.stats().requests_submitted, tally.accepted.load());
  (*target)->stop();
}

TEST(SubmitStopRace, ThreadsWithStripesOfTheirOwn) {
  for (int round = 0; round < 5; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    race_stop(4, 100 + 1000 * round, /*expect_own_stripes=*/true);
  }
}

TEST(SubmitStopRace, ThreadsBeyondTheSlotLimitShareStripes) {
  // Every slot held by a parked thread: the submitters get none.
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  size_t parked = 0;
  std::vector<std::thread> holders;
  for (size_t i = 0; i < kMaxThreadSlots; ++i) {
    holders.emplace_back([&] {
      thread_slot();
      std::unique_lock lock(mu);
      ++parked;
      cv.notify_all();
      cv.wait(lock, [&] { return release; });
    });
  }
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return parked == kMaxThreadSlots; });
  }
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    race_stop(4, 100 + 1000 * round, /*expect_own_stripes=*/false);
  }
  {
    std::lock_guard lock(mu);
    release = true;
  }
  cv.notify_all();
  for (std::thread& h : holders) h.join();
}

}  // namespace
}  // namespace fabric_lib

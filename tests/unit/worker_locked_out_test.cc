// What application threads and the callback thread do without the worker (issue 15:
// caller-thread operation, completions without the hop). Every domain is an InstantDomain (WRITEs
// complete at the next poll) behind a decorator that, on the worker's thread (the one that opened
// the domain), answers every post with kAgain and every poll with nothing: whatever completes
// here was posted and reaped by another thread.
//   - progress() posts what the completions it reaps make room for: a paged write of more pages
//     than the per-domain in-flight cap finishes only if it does.
//   - The callback thread reaps while callbacks flow: in a chain of requests, each submitted by
//     the previous one's callback, it polls completions itself (this test's decorator lets the
//     worker through and counts who polled what).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "engine/builder_testing.h"
#include "fabric_lib/fabric_lib.h"
#include "support/instant_domain.h"

namespace fabric_lib {
namespace {

class WorkerLockedOut final : public testing::ForwardingDomain {
 public:
  // `lock_out` false: everything goes through, and the decorator only counts who polled what.
  WorkerLockedOut(std::unique_ptr<transport::Domain> inner, bool lock_out)
      : ForwardingDomain(std::move(inner)), opener_(std::this_thread::get_id()), lock_out_(lock_out) {}
  transport::PostResult post_write(const transport::WriteWr& wr, Status* error) override {
    if (std::this_thread::get_id() == opener_) {
      if (lock_out_) return transport::PostResult::kAgain;
    } else {
      caller_posts.fetch_add(1, std::memory_order_relaxed);
    }
    return inner_->post_write(wr, error);
  }
  size_t poll(std::vector<transport::Event>& out, size_t max) override {
    const bool worker = std::this_thread::get_id() == opener_;
    if (worker && lock_out_) return 0;
    const size_t n = inner_->poll(out, max);
    if (!worker && n > 0) {
      std::lock_guard lock(mu_);
      events_by_thread_[std::this_thread::get_id()] += n;
    }
    return n;
  }
  bool has_deferred_work() const override { return false; }
  int wait_fd() const override { return -1; }
  bool ready_to_block() override { return false; }

  std::thread::id opener() const { return opener_; }
  // Events this domain's polls returned on `thread` (never counted for the worker).
  uint64_t events_on(std::thread::id thread) {
    std::lock_guard lock(mu_);
    auto it = events_by_thread_.find(thread);
    return it == events_by_thread_.end() ? 0 : it->second;
  }
  std::atomic<uint64_t> caller_posts{0};

 private:
  std::thread::id opener_;
  bool lock_out_;
  std::mutex mu_;
  std::map<std::thread::id, uint64_t> events_by_thread_;
};

class WorkerLockedOutTest : public ::testing::TestWithParam<size_t> {
 protected:
  // An engine whose domains lock the worker out, with `cap` WRs in flight per domain (0: the
  // provider's).
  std::unique_ptr<TransferEngine> build(size_t cap = 0, bool lock_out = true) {
    TransferEngineBuilder builder;
    builder.provider("shm").domains_per_group(GetParam());
    if (cap) builder.max_inflight_per_domain(cap);
    BuilderAccess::set_domain_decorator(builder, [this, lock_out](std::unique_ptr<transport::Domain> inner) {
      auto d = std::make_unique<WorkerLockedOut>(std::make_unique<testing::InstantDomain>(std::move(inner)), lock_out);
      domains_.push_back(d.get());
      return d;
    });
    Result<std::unique_ptr<TransferEngine>> built = builder.build();
    EXPECT_TRUE(built.ok()) << built.status().to_string();
    if (!built.ok()) return nullptr;
    EXPECT_EQ(domains_.size(), GetParam());
    for (WorkerLockedOut* d : domains_) EXPECT_NE(d->opener(), std::this_thread::get_id()) << "domains open on the worker";
    return std::move(built).value();
  }
  uint64_t caller_posts() const {
    uint64_t n = 0;
    for (WorkerLockedOut* d : domains_) n += d->caller_posts.load();
    return n;
  }

  std::vector<WorkerLockedOut*> domains_;  // owned by the engine
};

TEST_P(WorkerLockedOutTest, ProgressPostsWhatCompletionsMakeRoomFor) {
  constexpr size_t kCap = 8;  // WRs in flight per domain
  constexpr uint32_t kPages = 96;
  constexpr uint64_t kPage = 4096;
  std::unique_ptr<TransferEngine> built = build(kCap);
  ASSERT_TRUE(built);
  TransferEngine& engine = *built;

  std::vector<uint8_t> src(kPages * kPage, 1), dst(kPages * kPage, 0);
  Result<MrRegistration> s = engine.register_memory(src.data(), src.size(), Access::kLocalOnly);
  Result<MrRegistration> d = engine.register_memory(dst.data(), dst.size(), Access::kRemoteWrite);
  ASSERT_TRUE(s.ok() && d.ok());
  PagedWriteRequest paged{s->handle, d->desc, kPage};
  for (uint32_t i = 0; i < kPages; ++i) {
    paged.src_pages.push_back(i);
    paged.dst_pages.push_back(kPages - 1 - i);
  }
  paged.src_stride = paged.dst_stride = kPage;
  paged.imm = 5;

  CompletionCounter done;
  ASSERT_TRUE(engine.submit_paged_writes(paged, Completion::counter(done)).ok());
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (done.finished() < 1 && std::chrono::steady_clock::now() < give_up) engine.progress();
  ASSERT_EQ(done.finished(), 1u) << "the paged write did not finish: progress() did not post its waiting WRs";
  EXPECT_EQ(done.errors.load(), 0u);
  EXPECT_EQ(caller_posts(), kPages);  // every page posted once, all on this thread
  engine.stop();
}

// Not locked out here: whether the callback thread wins a completion or the worker does is a race
// (a submit that finds the worker mid-pass is queued for it), so what is proven is that the
// callback thread reaps at all — it never polls without set_reaper — and that every callback still
// runs on it, exactly once each.
TEST_P(WorkerLockedOutTest, CallbackThreadReapsWhileCallbacksFlow) {
  constexpr uint64_t kChain = 2000;
  constexpr uint64_t kBytes = 4096;
  std::unique_ptr<TransferEngine> engine = build(0, /*lock_out=*/false);
  ASSERT_TRUE(engine);
  std::vector<uint8_t> src(kBytes, 1), dst(kBytes, 0);
  Result<MrRegistration> s = engine->register_memory(src.data(), src.size(), Access::kLocalOnly);
  Result<MrRegistration> d = engine->register_memory(dst.data(), dst.size(), Access::kRemoteWrite);
  ASSERT_TRUE(s.ok() && d.ok());
  const WriteRequest write{s->handle, 0, d->desc, 0, kBytes, 3};

  struct Chain {
    std::atomic<uint64_t> ran{0}, failed{0}, off_thread{0};
    std::atomic<std::thread::id> callback_thread{};
    std::function<void()> next;
  } chain;
  const std::thread::id test_thread = std::this_thread::get_id();
  chain.next = [&] {
    Result<TransferId> id = engine->submit_write(write, Completion::callback([&](const Status& st) {
      // Every callback on the engine's one callback thread.
      const std::thread::id me = std::this_thread::get_id();
      std::thread::id first{};
      chain.callback_thread.compare_exchange_strong(first, me);
      if (me == test_thread || me != chain.callback_thread.load()) chain.off_thread.fetch_add(1);
      if (!st.ok()) chain.failed.fetch_add(1);
      if (chain.ran.fetch_add(1) + 1 < kChain) chain.next();
    }));
    if (!id.ok()) chain.failed.fetch_add(1);
  };
  chain.next();
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (chain.ran.load() < kChain && chain.failed.load() == 0 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // a duplicate callback would show
  EXPECT_EQ(chain.ran.load(), kChain);
  EXPECT_EQ(chain.failed.load(), 0u);
  EXPECT_EQ(chain.off_thread.load(), 0u);
  uint64_t reaped_by_callback_thread = 0;
  for (WorkerLockedOut* dom : domains_) reaped_by_callback_thread += dom->events_on(chain.callback_thread.load());
  EXPECT_GT(reaped_by_callback_thread, 0u) << "the callback thread never reaped a completion";
  EXPECT_LE(reaped_by_callback_thread, kChain);
  engine->stop();
}

INSTANTIATE_TEST_SUITE_P(Domains, WorkerLockedOutTest, ::testing::Values(1, 4),
                         [](const ::testing::TestParamInfo<size_t>& info) { return std::to_string(info.param) + "dom"; });

}  // namespace
}  // namespace fabric_lib

// A provider call that never returns (libfabric 1.17's shm does this when a peer dies holding a
// lock in its shared memory) must not hang the engine: the watchdog gives the stuck worker up,
// every request of its group completes exactly once with ProviderError, later calls fail fast,
// and stop() returns.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "fabric_lib/fabric_lib.h"
#include "engine/builder_testing.h"
#include "support/forwarding_domain.h"
#include "thread_state.h"
#include "transport/guard/provider_call_guard.h"

namespace fabric_lib {
namespace {

using namespace std::chrono_literals;

// Process-wide: a thread stuck in a hanging call outlives the test that started it.
struct Hang {
  std::mutex mu;
  std::condition_variable cv;
  bool armed = false;
  bool released = false;
  std::atomic<int> stuck{0};
  std::atomic<pid_t> stuck_tid{0};     // the thread that blocked
  std::atomic<bool> returned{false};  // it was released and left the call

  // True when the call blocked (and was released at last).
  bool maybe_block() {
    std::unique_lock lock(mu);
    if (!armed) return false;
    stuck.fetch_add(1);
    stuck_tid = testing::current_tid();
    cv.wait(lock, [this] { return released; });
    returned = true;
    return true;
  }
  void arm() {
    std::lock_guard lock(mu);
    armed = true;
  }
  void release() {
    {
      std::lock_guard lock(mu);
      released = true;
      armed = false;
    }
    cv.notify_all();
  }
};
Hang& hang() {
  static Hang* h = new Hang;  // never destroyed: parked threads may still look at it
  return *h;
}

// Forwards everything; post_write blocks while the hang is armed.
class HangingDomain final : public testing::ForwardingDomain {
 public:
  explicit HangingDomain(std::unique_ptr<transport::Domain> inner) : ForwardingDomain(std::move(inner)) {}
  // No control channel, as before the shared base: the probe stays off this test's domains.
  bool supports_control() const override { return false; }
  transport::PostResult post_write(const transport::WriteWr& wr, Status* e) override {
    if (hang().maybe_block()) {
      if (e) *e = Status(ErrorCode::kProviderError, "released");
      return transport::PostResult::kFailed;
    }
    return inner_->post_write(wr, e);
  }
  bool has_deferred_work() const override { return false; }  // as before the shared base
};

// post_write blocks while armed, but only on the thread named by `only` (the callback thread).
class CallbackThreadHang final : public testing::ForwardingDomain {
 public:
  struct State {
    Hang hang;
    std::atomic<std::thread::id> only{};
  };
  static State& state() {
    static State* s = new State;  // never destroyed: the parked callback thread may look at it
    return *s;
  }
  explicit CallbackThreadHang(std::unique_ptr<transport::Domain> inner) : ForwardingDomain(std::move(inner)) {}
  bool supports_control() const override { return false; }
  transport::PostResult post_write(const transport::WriteWr& wr, Status* e) override {
    if (std::this_thread::get_id() == state().only.load() && state().hang.maybe_block()) {
      if (e) *e = Status(ErrorCode::kProviderError, "released");
      return transport::PostResult::kFailed;
    }
    return inner_->post_write(wr, e);
  }
  bool has_deferred_work() const override { return false; }
};

// A provider that says its calls may never return (DomainInfo::calls_may_hang_on_dead_peer, as
// libfabric's shm does): post_write blocks on the worker while armed; on any other thread it
// counts the call and fails it instead of blocking, so that the test fails rather than hangs
// (or forwards it: fail_on_submitter).
class HangsAndSaysSo final : public testing::ForwardingDomain {
 public:
  struct State {
    Hang hang;
    std::atomic<std::thread::id> submitter{};
    std::atomic<int> posts_on_submitter{0};
    std::atomic<bool> fail_on_submitter{true};  // false: forward the submitter's calls too
  };
  static State& state() {
    static State* s = new State;  // never destroyed: the parked worker may look at it
    return *s;
  }
  explicit HangsAndSaysSo(std::unique_ptr<transport::Domain> inner) : ForwardingDomain(std::move(inner)) {
    info_ = ForwardingDomain::info();
    info_.calls_may_hang_on_dead_peer = true;
  }
  const transport::DomainInfo& info() const override { return info_; }
  bool supports_control() const override { return false; }
  transport::PostResult post_write(const transport::WriteWr& wr, Status* e) override {
    if (std::this_thread::get_id() == state().submitter.load()) {
      state().posts_on_submitter.fetch_add(1);
      if (!state().fail_on_submitter.load()) return inner_->post_write(wr, e);
      if (e) *e = Status(ErrorCode::kProviderError, "posted on the submitter's thread");
      return transport::PostResult::kFailed;
    }
    if (state().hang.maybe_block()) {
      if (e) *e = Status(ErrorCode::kProviderError, "released");
      return transport::PostResult::kFailed;
    }
    return inner_->post_write(wr, e);
  }
  size_t poll(std::vector<transport::Event>& out, size_t max) override {
    if (std::this_thread::get_id() == state().submitter.load()) state().posts_on_submitter.fetch_add(1);
    return inner_->poll(out, max);
  }
  bool has_deferred_work() const override { return false; }

 private:
  transport::DomainInfo info_;
};

TEST(ProviderCallGuard, AbandonsOnlyAThreadStillInsideTheSameCall) {
  transport::ProviderCallGuard watch;
  EXPECT_FALSE(watch.try_abandon(watch.sample()));  // not inside a call
  // A call that returned: its odd sample no longer matches.
  std::thread([&] {
    watch.enter();
    watch.leave();
  }).join();
  std::atomic<uint64_t> inside{0};
  std::thread first([&] { watch.enter(); inside = watch.sample(); watch.leave(); });
  first.join();
  EXPECT_EQ(inside.load() & 1, 1u);
  EXPECT_FALSE(watch.try_abandon(inside.load()));
  EXPECT_FALSE(watch.abandoned());

  // A call that never returns (until released; then the thread parks for good).
  struct Shared {
    transport::ProviderCallGuard watch;
    std::atomic<bool> blocked{true}, leaving{false}, ran_on{false};
    std::atomic<pid_t> tid{0};
  };
  auto shared = std::make_shared<Shared>();  // the parked thread keeps it for good
  std::thread stuck([shared] {
    shared->tid = testing::current_tid();
    shared->watch.enter();
    while (shared->blocked.load()) std::this_thread::yield();
    shared->leaving = true;
    shared->watch.leave();  // parks: the watchdog won
    shared->ran_on = true;
  });
  uint64_t sample = 0;
  while (((sample = shared->watch.sample()) & 1) == 0) std::this_thread::yield();
  EXPECT_TRUE(shared->watch.try_abandon(sample));
  EXPECT_TRUE(shared->watch.abandoned());
  EXPECT_FALSE(shared->watch.try_abandon(sample));  // once
  shared->blocked = false;
  stuck.detach();
  // It left the call and is now asleep in the kernel for good: parked, not running on.
  const auto give_up = std::chrono::steady_clock::now() + 5s;
  while (!(shared->leaving.load() && testing::thread_state(shared->tid.load()) == 'S') && !shared->ran_on.load() &&
         std::chrono::steady_clock::now() < give_up) {
    std::this_thread::yield();
  }
  EXPECT_TRUE(shared->leaving.load() && testing::thread_state(shared->tid.load()) == 'S') << "the given-up thread never parked";
  EXPECT_FALSE(shared->ran_on.load()) << "a given-up thread ran on";
}

TEST(ProviderWatchdog, AStuckProviderCallFailsItsGroupInsteadOfHangingIt) {
  auto target = TransferEngineBuilder().provider("tcp").domains_per_group(2).build();
  ASSERT_TRUE(target.ok()) << target.status().to_string();
  std::vector<uint8_t> dst(1 << 20, 0);
  auto dst_reg = (*target)->register_memory(dst.data(), dst.size(), Access::kRemoteWrite);
  ASSERT_TRUE(dst_reg.ok());

  TransferEngineBuilder hanging;
  // Every post on the worker: this test strands the worker. (With caller-thread posting the
  // stuck call could be this thread's own submit, which nothing can bring back: the builder's
  // post_on_caller_thread caveat.)
  hanging.provider("tcp").domains_per_group(2).stall_timeout(300ms).post_on_caller_thread(false);
  BuilderAccess::set_domain_decorator(
      hanging, [](std::unique_ptr<transport::Domain> inner) { return std::make_unique<HangingDomain>(std::move(inner)); });
  auto engine = hanging.build();
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  std::vector<uint8_t> src(1 << 20, 7);
  auto src_reg = (*engine)->register_memory(src.data(), src.size(), Access::kLocalOnly);
  ASSERT_TRUE(src_reg.ok());
  const WriteRequest write{src_reg->handle, 0, dst_reg->desc, 0, 4096};

  // Before: writes work.
  CompletionCounter before;
  for (int i = 0; i < 20; ++i) {
    auto id = (*engine)->submit_write(write, Completion::counter(before));
    ASSERT_TRUE(id.ok()) << id.status().to_string();
  }
  ASSERT_TRUE(before.wait_for(20, 10s));
  EXPECT_EQ(before.errors.load(), 0u);

  // The provider stops returning from post_write.
  hang().arm();
  constexpr int kRequests = 300;
  std::vector<std::atomic<int>> calls(kRequests);
  std::vector<std::atomic<int>> codes(kRequests);
  std::atomic<int> finished{0};
  for (int i = 0; i < kRequests; ++i) {
    ASSERT_TRUE((*engine)
                    ->submit_write(write, Completion::callback([&, i](const Status& s) {
                                     codes[i] = static_cast<int>(s.code());
                                     calls[i].fetch_add(1);
                                     finished.fetch_add(1);
                                   }))
                    .ok());
  }
  const auto t0 = std::chrono::steady_clock::now();
  while (finished.load() < kRequests && std::chrono::steady_clock::now() - t0 < 20s) std::this_thread::sleep_for(5ms);
  ASSERT_EQ(finished.load(), kRequests) << "requests of a stuck group must not wait forever";
  EXPECT_GE(hang().stuck.load(), 1);
  int provider_errors = 0;
  for (int i = 0; i < kRequests; ++i) {
    EXPECT_EQ(calls[i].load(), 1) << "request " << i;
    provider_errors += codes[i] == static_cast<int>(ErrorCode::kProviderError);
  }
  EXPECT_EQ(provider_errors, kRequests);  // the first WR of the first one never got posted
  EXPECT_EQ((*engine)->stats().groups_abandoned, 1u);

  // Later calls come back at once, with the reason.
  CompletionCounter later;
  auto id = (*engine)->submit_write(write, Completion::counter(later));
  if (id.ok()) {
    ASSERT_TRUE(later.wait_for(1, 5s));
    EXPECT_EQ(later.errors.load(), 1u);
  }
  std::vector<uint8_t> more(4096);
  auto reg = (*engine)->register_memory(more.data(), more.size(), Access::kLocalOnly);
  ASSERT_FALSE(reg.ok());
  EXPECT_EQ(reg.status().code(), ErrorCode::kProviderError) << reg.status().to_string();

  const auto stop_start = std::chrono::steady_clock::now();
  EXPECT_TRUE((*engine)->stop().ok());
  EXPECT_LT(std::chrono::steady_clock::now() - stop_start, 5s);
  engine->reset();  // leaves the stuck worker behind
  // The call returns at last; the given-up thread parks instead of touching anything: it left
  // the hanging call and sleeps in the kernel (park_forever) from then on.
  hang().release();
  const auto give_up = std::chrono::steady_clock::now() + 5s;
  while (!(hang().returned.load() && testing::thread_state(hang().stuck_tid.load()) == 'S') &&
         std::chrono::steady_clock::now() < give_up) {
    std::this_thread::yield();
  }
  EXPECT_TRUE(hang().returned.load()) << "the stuck call never returned";
  EXPECT_EQ(testing::thread_state(hang().stuck_tid.load()), 'S') << "the given-up worker did not park";

  // The rest of the process is unaffected.
  auto fresh = TransferEngineBuilder().provider("tcp").domains_per_group(2).build();
  ASSERT_TRUE(fresh.ok());
  std::vector<uint8_t> src2(4096, 9);
  auto src2_reg = (*fresh)->register_memory(src2.data(), src2.size(), Access::kLocalOnly);
  ASSERT_TRUE(src2_reg.ok());
  CompletionCounter after;
  ASSERT_TRUE((*fresh)->submit_write({src2_reg->handle, 0, dst_reg->desc, 8192, 4096}, Completion::counter(after)).ok());
  ASSERT_TRUE(after.wait_for(1, 10s));
  EXPECT_EQ(after.errors.load(), 0u);
  EXPECT_EQ(dst[8192], 9);
}

// The callback thread drives the group too (it reaps while callbacks flow, and a callback may
// submit and post on it). If it is the thread the watchdog finds stuck inside a provider call, a
// new callback thread takes over: every request of the given-up group still completes exactly
// once, on the new thread, and later callbacks run.
TEST(ProviderWatchdog, AStuckCallbackThreadIsReplacedAndCallbacksKeepRunning) {
  auto target = TransferEngineBuilder().provider("tcp").domains_per_group(1).build();
  ASSERT_TRUE(target.ok()) << target.status().to_string();
  std::vector<uint8_t> dst(1 << 20, 0);
  auto dst_reg = (*target)->register_memory(dst.data(), dst.size(), Access::kRemoteWrite);
  ASSERT_TRUE(dst_reg.ok());
  TransferEngineBuilder builder;
  builder.provider("tcp").domains_per_group(1).stall_timeout(300ms);
  BuilderAccess::set_domain_decorator(
      builder, [](std::unique_ptr<transport::Domain> inner) { return std::make_unique<CallbackThreadHang>(std::move(inner)); });
  auto engine = builder.build();
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  std::vector<uint8_t> src(1 << 20, 3);
  auto src_reg = (*engine)->register_memory(src.data(), src.size(), Access::kLocalOnly);
  ASSERT_TRUE(src_reg.ok());
  const WriteRequest write{src_reg->handle, 0, dst_reg->desc, 0, 4096};
  CallbackThreadHang::State& st = CallbackThreadHang::state();

  // The first callback arms the hang for its own thread and submits until one of its submits
  // posts on that thread (post_on_caller), which then never returns.
  constexpr int kMore = 400;
  std::vector<std::atomic<int>> calls(kMore + 2);
  std::vector<std::atomic<std::thread::id>> ran_on(kMore + 2);
  std::atomic<int> finished{0};
  std::atomic<std::thread::id> first_thread{};
  auto sink = [&](int i) {
    return Completion::callback([&, i](const Status&) {
      ran_on[i] = std::this_thread::get_id();
      calls[i].fetch_add(1);
      finished.fetch_add(1);
    });
  };
  ASSERT_TRUE((*engine)
                  ->submit_write(write, Completion::callback([&](const Status&) {
                                   first_thread = std::this_thread::get_id();
                                   calls[0].fetch_add(1);
                                   finished.fetch_add(1);
                                   st.only = std::this_thread::get_id();
                                   st.hang.arm();
                                   // Each submit after the previous one's WR was posted: with nothing
                                   // queued, a submit posts on this thread as soon as it wins the
                                   // group (on a loaded machine every try of a burst could lose to a
                                   // worker that is descheduled while it holds the group).
                                   for (int i = 1; i <= kMore && st.hang.stuck.load() == 0; ++i) {
                                     (void)(*engine)->submit_write(write, sink(i));
                                     const auto until = std::chrono::steady_clock::now() + 2s;
                                     while (st.hang.stuck.load() == 0 &&
                                            (*engine)->stats().wrs_posted < static_cast<uint64_t>(i) + 1 &&
                                            std::chrono::steady_clock::now() < until) {
                                       std::this_thread::yield();
                                     }
                                   }
                                 }))
                  .ok());
  // Every request ends: the ones queued behind the stuck post fail with the group, on a new
  // callback thread; the stuck one's own completion too.
  const auto t0 = std::chrono::steady_clock::now();
  int submitted = 0;
  while (std::chrono::steady_clock::now() - t0 < 20s) {
    submitted = 0;
    for (int i = 1; i <= kMore; ++i) submitted += ran_on[i].load() != std::thread::id{} || calls[i].load() > 0;
    if (st.hang.stuck.load() > 0 && (*engine)->stats().groups_abandoned > 0 &&
        finished.load() == static_cast<int>((*engine)->stats().requests_submitted)) {
      break;
    }
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_EQ(st.hang.stuck.load(), 1) << "no submit posted on the callback thread";
  EXPECT_EQ((*engine)->stats().groups_abandoned, 1u);
  const auto requests = (*engine)->stats().requests_submitted;
  ASSERT_EQ(finished.load(), static_cast<int>(requests)) << "requests of the given-up group must still complete";
  for (size_t i = 0; i < requests; ++i) EXPECT_EQ(calls[i].load(), 1) << "request " << i;
  for (size_t i = 1; i < requests; ++i) EXPECT_NE(ran_on[i].load(), first_thread.load()) << "request " << i;
  // Later callbacks run too (a later submit to the given-up group fails at once, reported there).
  std::atomic<int> later{0};
  auto id = (*engine)->submit_write(write, Completion::callback([&](const Status&) { later.fetch_add(1); }));
  if (id.ok()) {
    const auto t1 = std::chrono::steady_clock::now();
    while (later.load() == 0 && std::chrono::steady_clock::now() - t1 < 5s) std::this_thread::sleep_for(1ms);
    EXPECT_EQ(later.load(), 1);
  }
  EXPECT_TRUE((*engine)->stop().ok());
  engine->reset();
  st.hang.release();  // the stuck callback thread leaves the call and parks for good
}

// The tests of HangsAndSaysSo: a tcp target, and an engine whose one domain is wrapped in it.
class ProviderThatMayHang : public ::testing::Test {
 protected:
  void SetUp() override {
    auto target = TransferEngineBuilder().provider("tcp").domains_per_group(1).build();
    ASSERT_TRUE(target.ok()) << target.status().to_string();
    target_ = std::move(target).value();
    auto reg = target_->register_memory(dst_.data(), dst_.size(), Access::kRemoteWrite);
    ASSERT_TRUE(reg.ok());
    dst_desc_ = reg->desc;
    HangsAndSaysSo::state().submitter = std::this_thread::get_id();
    HangsAndSaysSo::state().posts_on_submitter = 0;
  }
  // Builds the engine from `builder` over HangsAndSaysSo; its 4 KiB source holds `fill`.
  void build(TransferEngineBuilder& builder, uint8_t fill) {
    BuilderAccess::set_domain_decorator(
        builder, [](std::unique_ptr<transport::Domain> inner) { return std::make_unique<HangsAndSaysSo>(std::move(inner)); });
    auto engine = builder.build();
    ASSERT_TRUE(engine.ok()) << engine.status().to_string();
    engine_ = std::move(engine).value();
    src_.assign(4096, fill);
    auto reg = engine_->register_memory(src_.data(), src_.size(), Access::kLocalOnly);
    ASSERT_TRUE(reg.ok());
    write_ = {reg->handle, 0, dst_desc_, 0, src_.size()};
  }

  CompletionCounter before_, during_;  // before the engine, which reports to them until stopped
  std::vector<uint8_t> dst_ = std::vector<uint8_t>(1 << 20, 0);
  std::vector<uint8_t> src_;
  std::unique_ptr<TransferEngine> target_, engine_;
  MrDesc dst_desc_;
  WriteRequest write_;
};

// On a provider whose calls may never return, no provider call is made on the application's
// threads even with caller-thread posting on (the default): a submit never strands its caller
// in a call that hangs — the worker makes them all, and the watchdog can give it up.
TEST_F(ProviderThatMayHang, ASubmitterNeverEntersItsCalls) {
  HangsAndSaysSo::State& st = HangsAndSaysSo::state();
  TransferEngineBuilder builder;
  builder.provider("tcp").domains_per_group(1).stall_timeout(300ms).idle_policy(IdlePolicy::kSpin);
  ASSERT_NO_FATAL_FAILURE(build(builder, 5));

  // Writes work, posted and reaped by the worker only; progress() does nothing here.
  size_t handled = 0;
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(engine_->submit_write(write_, Completion::counter(before_)).ok());
    handled += engine_->progress();
  }
  ASSERT_TRUE(before_.wait_for(200, 10s));
  EXPECT_EQ(before_.errors.load(), 0u);
  EXPECT_EQ(handled, 0u);
  EXPECT_EQ(dst_[0], 5);

  // The provider stops returning: submits still return, and their requests fail with the group.
  st.hang.arm();
  for (int i = 0; i < 200; ++i) {
    auto id = engine_->submit_write(write_, Completion::counter(during_));
    ASSERT_TRUE(id.ok()) << id.status().to_string();
  }
  ASSERT_TRUE(during_.wait_for(200, 20s)) << "requests of a stuck group must not wait forever";
  EXPECT_EQ(during_.errors.load(), 200u);
  EXPECT_EQ(engine_->stats().groups_abandoned, 1u);
  EXPECT_EQ(st.posts_on_submitter.load(), 0) << "a provider call was made on the submitter's thread";
  EXPECT_TRUE(engine_->stop().ok());
  engine_.reset();  // leaves the stuck worker behind
  st.hang.release();
}

// trust_provider_calls(true) takes the engine at its word that the provider's calls return:
// submits on such a provider post on the submitter's thread again, and every write lands.
TEST_F(ProviderThatMayHang, TrustedCallsArePostedOnTheSubmitter) {
  HangsAndSaysSo::State& st = HangsAndSaysSo::state();
  st.fail_on_submitter = false;
  TransferEngineBuilder builder;
  builder.provider("tcp").domains_per_group(1).trust_provider_calls(true);
  ASSERT_NO_FATAL_FAILURE(build(builder, 6));
  // One at a time: with nothing queued, a submit posts on this thread once it wins the group
  // (a worker that holds it at that moment takes the request instead: some, not all, land here).
  // At least 200, and on until one was posted here: on a loaded 2-core machine (ctest -j2) the
  // worker held the group at every one of 200 submits once.
  const auto give_up = std::chrono::steady_clock::now() + 20s;
  uint64_t submitted = 0;
  while (submitted < 200 || (st.posts_on_submitter.load() == 0 && std::chrono::steady_clock::now() < give_up)) {
    ASSERT_TRUE(engine_->submit_write(write_, Completion::counter(before_)).ok());
    ASSERT_TRUE(before_.wait_for(++submitted, 10s));
  }
  EXPECT_EQ(before_.errors.load(), 0u);
  EXPECT_EQ(dst_[4095], 6);
  EXPECT_GT(st.posts_on_submitter.load(), 0) << "no submit posted on the submitter's thread";
  EXPECT_TRUE(engine_->stop().ok());
  st.fail_on_submitter = true;
}

}  // namespace
}  // namespace fabric_lib

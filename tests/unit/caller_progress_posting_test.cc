// TransferEngine::progress() posts what the completions it reaps make room for: a thread that
// drives progress() never waits for the worker to wake up and post the rest of a request that
// did not fit the provider's queue at once (issue 15: caller-thread operation).
//
// Proven with the worker taken out of the write path: every domain is an InstantDomain (WRITEs
// complete at the next poll) behind a decorator that, on the worker's thread (the one that
// opened the domain), answers every post with kAgain and every poll with nothing. A paged write
// of more pages than the per-domain in-flight cap can then only finish if progress() posts.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "engine/builder_testing.h"
#include "fabric_lib/fabric_lib.h"
#include "support/instant_domain.h"

namespace fabric_lib {
namespace {

class WorkerLockedOut final : public testing::ForwardingDomain {
 public:
  explicit WorkerLockedOut(std::unique_ptr<transport::Domain> inner)
      : ForwardingDomain(std::move(inner)), opener_(std::this_thread::get_id()) {}
  transport::PostResult post_write(const transport::WriteWr& wr, Status* error) override {
    if (std::this_thread::get_id() == opener_) {
      worker_tries.fetch_add(1, std::memory_order_relaxed);
      return transport::PostResult::kAgain;
    }
    caller_posts.fetch_add(1, std::memory_order_relaxed);
    return inner_->post_write(wr, error);
  }
  size_t poll(std::vector<transport::Event>& out, size_t max) override {
    if (std::this_thread::get_id() == opener_) return 0;
    return inner_->poll(out, max);
  }
  bool has_deferred_work() const override { return false; }
  int wait_fd() const override { return -1; }
  bool ready_to_block() override { return false; }

  std::thread::id opener() const { return opener_; }
  std::atomic<uint64_t> worker_tries{0};
  std::atomic<uint64_t> caller_posts{0};

 private:
  std::thread::id opener_;
};

class ProgressPostsTest : public ::testing::TestWithParam<size_t> {};

TEST_P(ProgressPostsTest, ProgressPostsWhatCompletionsMakeRoomFor) {
  constexpr size_t kCap = 8;  // WRs in flight per domain
  constexpr uint32_t kPages = 96;
  constexpr uint64_t kPage = 4096;
  std::vector<WorkerLockedOut*> domains;
  TransferEngineBuilder builder;
  builder.provider("shm").domains_per_group(GetParam()).max_inflight_per_domain(kCap);
  BuilderAccess::set_domain_decorator(builder, [&](std::unique_ptr<transport::Domain> inner) {
    auto d = std::make_unique<WorkerLockedOut>(std::make_unique<testing::InstantDomain>(std::move(inner)));
    domains.push_back(d.get());
    return d;
  });
  Result<std::unique_ptr<TransferEngine>> built = builder.build();
  ASSERT_TRUE(built.ok()) << built.status().to_string();
  TransferEngine& engine = **built;
  ASSERT_EQ(domains.size(), GetParam());
  for (WorkerLockedOut* d : domains) ASSERT_NE(d->opener(), std::this_thread::get_id()) << "domains open on the worker";

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
  uint64_t posted = 0;
  for (WorkerLockedOut* dom : domains) posted += dom->caller_posts.load();
  EXPECT_EQ(posted, kPages);  // every page posted once, all on this thread
  engine.stop();
}

INSTANTIATE_TEST_SUITE_P(Domains, ProgressPostsTest, ::testing::Values(1, 4),
                         [](const ::testing::TestParamInfo<size_t>& info) { return std::to_string(info.param) + "dom"; });

}  // namespace
}  // namespace fabric_lib

// Where in a pass the worker takes a request that arrives while it polls (DomainInfo::
// posts_issued_by_poll): between two domains' polls for providers whose poll is slow (tcp), so a
// submit does not wait for every other domain's poll; only before the next pass's polls for
// backends whose poll issues what was posted (ipc: one page-copy launch per poll), so that the
// request joins the pass's batch instead of going out as a launch of its own.
//
// A decorator in front of a 2-domain tcp writer (post_on_caller_thread off: every request goes
// through the worker's inbox) holds domain 0's poll until the test has submitted a write, then
// logs the order of what follows: the write's post, and domain 1's next poll.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/builder_testing.h"
#include "fabric_lib/fabric_lib.h"
#include "support/forwarding_domain.h"

namespace fabric_lib::testing {
namespace {

using namespace std::chrono_literals;

struct PassLog {
  bool posts_issued_by_poll = false;  // what the decorated domains report
  std::mutex mu;
  std::condition_variable cv;
  bool armed = false;      // domain 0's next poll holds until `submitted`
  bool holding = false;    // domain 0's poll is holding now
  bool submitted = false;  // the test's submit_write returned
  bool recording = false;  // from the held poll's end: log posts and domain 1's polls
  std::vector<std::string> events;
  int opened = 0;  // domains decorated so far (their index)
};

class PassOrderDomain final : public ForwardingDomain {
 public:
  PassOrderDomain(std::unique_ptr<transport::Domain> inner, PassLog* log, int index)
      : ForwardingDomain(std::move(inner)), log_(log), index_(index), info_(inner_->info()) {
    info_.posts_issued_by_poll = log->posts_issued_by_poll;
  }
  const transport::DomainInfo& info() const override { return info_; }

  transport::PostResult post_write(const transport::WriteWr& wr, Status* e) override {
    {
      std::lock_guard lock(log_->mu);
      if (log_->recording) log_->events.push_back("post");
    }
    return inner_->post_write(wr, e);
  }
  size_t post_writes(std::span<const transport::WriteWr> wrs, transport::PostResult* last, Status* e) override {
    {
      std::lock_guard lock(log_->mu);
      if (log_->recording) log_->events.push_back("post");
    }
    return inner_->post_writes(wrs, last, e);
  }
  size_t poll(std::vector<transport::Event>& out, size_t max) override {
    {
      std::unique_lock lock(log_->mu);
      if (index_ == 0 && log_->armed) {
        log_->armed = false;
        log_->holding = true;
        log_->cv.notify_all();
        log_->cv.wait_for(lock, 10s, [&] { return log_->submitted; });
        log_->holding = false;
        log_->recording = true;
      } else if (index_ == 1 && log_->recording) {
        log_->events.push_back("poll1");
      }
    }
    return inner_->poll(out, max);
  }

 private:
  PassLog* log_;
  int index_;
  transport::DomainInfo info_;
};

TransferEngineBuilder tcp_builder() {
  TransferEngineBuilder b;
  b.provider("tcp").interfaces({"lo"}).domains_per_group(2).stall_timeout(std::chrono::nanoseconds(0));
  return b;
}

// Runs one held poll with a submit in it; returns the log from the held poll's end.
std::vector<std::string> order_after_a_submit_during_a_poll(bool posts_issued_by_poll) {
  PassLog log;
  log.posts_issued_by_poll = posts_issued_by_poll;
  auto target = tcp_builder().build();
  EXPECT_TRUE(target.ok()) << target.status().to_string();
  if (!target.ok()) return {};
  TransferEngineBuilder b = tcp_builder();
  b.idle_policy(IdlePolicy::kSpin).post_on_caller_thread(false);
  BuilderAccess::set_domain_decorator(b, [&log](std::unique_ptr<transport::Domain> inner) {
    std::lock_guard lock(log.mu);
    return std::unique_ptr<transport::Domain>(std::make_unique<PassOrderDomain>(std::move(inner), &log, log.opened++));
  });
  auto writer = b.build();
  EXPECT_TRUE(writer.ok()) << writer.status().to_string();
  if (!writer.ok()) return {};
  std::vector<uint8_t> dst(4096, 0), src(4096);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 37 + 11);
  auto dst_reg = (*target)->register_memory(dst.data(), dst.size(), Access::kRemoteWrite);
  auto src_reg = (*writer)->register_memory(src.data(), src.size(), Access::kLocalOnly);
  EXPECT_TRUE(dst_reg.ok() && src_reg.ok());
  if (!dst_reg.ok() || !src_reg.ok()) return {};

  CompletionCounter done;
  {
    std::unique_lock lock(log.mu);
    log.armed = true;
    EXPECT_TRUE(log.cv.wait_for(lock, 10s, [&] { return log.holding; })) << "the worker never polled domain 0";
  }
  // The worker is inside domain 0's poll: this request waits in its inbox.
  EXPECT_TRUE((*writer)->submit_write({src_reg->handle, 0, dst_reg->desc, 0, src.size(), 77}, Completion::counter(done)).ok());
  {
    std::lock_guard lock(log.mu);
    log.submitted = true;
    log.cv.notify_all();
  }
  EXPECT_TRUE(done.wait_for(1, 10s));
  EXPECT_EQ(done.errors.load(), 0u);
  const auto until = std::chrono::steady_clock::now() + 10s;
  while ((*target)->imms().count(77) < 1 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  EXPECT_EQ((*target)->imms().count(77), 1u);
  EXPECT_EQ(dst, src);
  (*writer)->stop();
  (*target)->stop();
  std::lock_guard lock(log.mu);
  return log.events;
}

size_t first_of(const std::vector<std::string>& events, const std::string& what) {
  return std::find(events.begin(), events.end(), what) - events.begin();
}

TEST(WorkerPassOrder, ASlowPollProvidersRequestIsPostedBeforeTheNextDomainsPoll) {
  const std::vector<std::string> events = order_after_a_submit_during_a_poll(false);
  ASSERT_LT(first_of(events, "post"), events.size());
  EXPECT_LT(first_of(events, "post"), first_of(events, "poll1")) << "the request waited for domain 1's poll";
}

TEST(WorkerPassOrder, WherePollsIssueThePostsTheRequestWaitsForTheNextPass) {
  const std::vector<std::string> events = order_after_a_submit_during_a_poll(true);
  ASSERT_LT(first_of(events, "post"), events.size());
  ASSERT_LT(first_of(events, "poll1"), events.size());
  EXPECT_LT(first_of(events, "poll1"), first_of(events, "post")) << "the request was taken between two domains' polls";
}

}  // namespace
}  // namespace fabric_lib::testing

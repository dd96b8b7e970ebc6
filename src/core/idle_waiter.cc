#include "core/idle_waiter.h"

#include <poll.h>
#include <sched.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>

namespace fabric_lib::detail {

IdleWaiter::IdleWaiter(IdlePolicy policy, WorkerInbox& inbox, const std::vector<transport::Domain*>& domains)
    : policy_(policy), inbox_(inbox), domains_(domains), last_busy_(std::chrono::steady_clock::now()) {
  if (policy_ != IdlePolicy::kAdaptive) return;
  bool all_fds = !domains_.empty();
  for (transport::Domain* d : domains_) all_fds = all_fds && d->wait_fd() >= 0;
  if (!all_fds) return;
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd_ < 0) return;
  auto add = [&](int fd) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    return epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) == 0;
  };
  bool ok = add(inbox_.event_fd());
  for (transport::Domain* d : domains_) ok = ok && add(d->wait_fd());
  if (!ok) {
    close(epoll_fd_);
    epoll_fd_ = -1;
  }
}

IdleWaiter::~IdleWaiter() {
  if (epoll_fd_ >= 0) close(epoll_fd_);
}

void IdleWaiter::after_pass(bool busy, bool must_poll, bool inflight, bool caller_polls, int64_t max_sleep_ns,
                            int64_t now_ns, const std::function<void()>& release) {
  const std::chrono::steady_clock::time_point now(
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::nanoseconds(now_ns)));
  if (busy) {
    last_busy_ = now;
    backoff_ = std::chrono::microseconds(0);
  }
  if (caller_polls) {
    // An application thread drives progress(): it reaps, and posts what the completions make
    // room for. A worker that kept passing beside it would only take the group's ownership from
    // it (on a 2-core machine, 0.4 vs 2.5 us per single write, by chance) — it stands by,
    // woken by pokes, until the caller stops polling. Under kSpin too: the spinning is that
    // thread's now.
    release();
    nap(max_sleep_ns);
    return;
  }
  if (policy_ == IdlePolicy::kSpin) {
    release();
    return;
  }
  if (busy) {
    release();
    return;
  }
  if (must_poll) {
    release();
    sched_yield();
    return;
  }
  if (now - last_busy_ < kSpinBudget || max_sleep_ns <= 0) {
    release();
    return;
  }
  inflight_ = inflight;
  warm_ = now - last_busy_ < kWarmWindow;
  block(max_sleep_ns, release);
}

void IdleWaiter::block(int64_t max_sleep_ns, const std::function<void()>& release) {
  inbox_.set_blocked(true);
  inbox_.set_sleeping(true);
  bool released = false;
  if (!inbox_.has_work()) {
    bool blocked = false;
    if (epoll_fd_ >= 0) {
      bool ready = true;
      for (transport::Domain* d : domains_) ready = ready && d->ready_to_block();
      release();  // the last provider call of this pass was made
      released = true;
      if (ready && !inbox_.has_work()) {
        epoll_event events[8];
        const int64_t timeout_ms = std::min<int64_t>(kBlockTimeoutMs, (max_sleep_ns + 999'999) / 1'000'000);
        epoll_wait(epoll_fd_, events, 8, static_cast<int>(timeout_ms));
        blocked = true;
      }
    }
    if (!released) {
      release();
      released = true;
    }
    if (!blocked && epoll_fd_ < 0 && !inbox_.has_work()) {
      const auto cap = inflight_ || warm_ ? kMaxBackoffInflight : kMaxBackoffIdle;
      backoff_ = std::min(cap, std::max(std::chrono::microseconds(8), backoff_ * 2));
      const int64_t sleep_ns = std::min<int64_t>(backoff_.count() * 1000, max_sleep_ns);
      pollfd pfd{inbox_.event_fd(), POLLIN, 0};
      timespec ts{0, static_cast<long>(sleep_ns)};
      ppoll(&pfd, 1, &ts, nullptr);
    }
  }
  if (!released) release();
  inbox_.set_sleeping(false);
  inbox_.set_blocked(false);
  inbox_.clear_wakeups();
}

void IdleWaiter::nap(int64_t max_sleep_ns) {
  if (max_sleep_ns <= 0) return;
  backoff_ = std::min<std::chrono::microseconds>(kSpinBudget, std::max(std::chrono::microseconds(8), backoff_ * 2));
  inbox_.set_sleeping(true);
  if (!inbox_.has_work()) {
    const int64_t sleep_ns = std::min<int64_t>(backoff_.count() * 1000, max_sleep_ns);
    pollfd pfd{inbox_.event_fd(), POLLIN, 0};
    timespec ts{sleep_ns / 1'000'000'000, static_cast<long>(sleep_ns % 1'000'000'000)};
    ppoll(&pfd, 1, &ts, nullptr);
  }
  inbox_.set_sleeping(false);
  inbox_.clear_wakeups();
}

}  // namespace fabric_lib::detail

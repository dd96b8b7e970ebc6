// The worker's idle policy (DESIGN.md section 4): spin, or spin briefly after activity and then
// block on the completion queues' fds plus the inbox eventfd; where a provider offers no fd
// (shm, udp;ofi_rxd), sleep with a growing back-off instead. An idle engine must not burn a core.
#pragma once

#include <chrono>
#include <functional>
#include <vector>

#include "core/worker_inbox.h"
#include "fabric_lib/idle_policy.h"
#include "transport/domain.h"

namespace fabric_lib::detail {

class IdleWaiter {
 public:
  IdleWaiter(IdlePolicy policy, WorkerInbox& inbox, const std::vector<transport::Domain*>& domains);
  ~IdleWaiter();
  IdleWaiter(const IdleWaiter&) = delete;
  IdleWaiter& operator=(const IdleWaiter&) = delete;

  // Called after every pass of the worker loop. `busy`: the pass did something. `must_poll`: work
  // is pending that only polling advances (posts held back by back-pressure, deferred WRs).
  // `inflight`: WRs are outstanding (their completions will come). `max_sleep_ns`: the worker
  // has a timer (deadline, stall sweep) due in this long. `caller_polls`: an application thread
  // called TransferEngine::progress() within the spin budget — it is the group's spinner then, so
  // the worker naps (under either policy) instead of competing with it for the cores and the
  // group's ownership.
  // `release` gives the worker's progress ownership up; it is called exactly once, before any
  // sleep (after the last provider call of the pass: ready_to_block). `now_ns` is the pass's one
  // clock read (monotonic_ns()): an idle spinning pass is short enough that a second read shows.
  void after_pass(bool busy, bool must_poll, bool inflight, bool caller_polls, int64_t max_sleep_ns, int64_t now_ns,
                  const std::function<void()>& release);
  // Sleeps without touching the domains (the caller holds no progress ownership): on the inbox's
  // eventfd, for a back-off that grows up to kSpinBudget and at most `max_sleep_ns`; a submit or
  // command that pokes the inbox ends it. For a worker standing by while an application thread
  // drives progress() (adaptive policy).
  void nap(int64_t max_sleep_ns);

  // How long the worker keeps spinning after its last activity, in adaptive mode.
  static constexpr std::chrono::microseconds kSpinBudget{200};
  // Providers without a CQ fd (shm, udp;ofi_rxd) are polled with a growing back-off: at most
  // kMaxBackoffInflight while WRs are out or within kWarmWindow of the last activity (a passive
  // target of a bulk transfer must not sit it out in long sleeps), else up to kMaxBackoffIdle.
  static constexpr std::chrono::microseconds kMaxBackoffIdle{1000};
  static constexpr std::chrono::microseconds kMaxBackoffInflight{50};
  static constexpr std::chrono::milliseconds kWarmWindow{100};
  static constexpr int kBlockTimeoutMs = 100;

 private:
  void block(int64_t max_sleep_ns, const std::function<void()>& release);

  IdlePolicy policy_;
  WorkerInbox& inbox_;
  std::vector<transport::Domain*> domains_;
  int epoll_fd_ = -1;  // >= 0 when every domain has a wait fd
  std::chrono::steady_clock::time_point last_busy_;
  std::chrono::microseconds backoff_{0};
  bool inflight_ = false;
  bool warm_ = false;
};

}  // namespace fabric_lib::detail

#include "core/provider_watchdog.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <string>

#include "base/log.h"

namespace fabric_lib::detail {

ProviderWatchdog::ProviderWatchdog(std::vector<GroupWorker*> workers, int64_t timeout_ns, StatCounters& stats,
                                   std::function<void(uintptr_t)> on_stuck_thread)
    : timeout_ns_(timeout_ns), stats_(stats), on_stuck_thread_(std::move(on_stuck_thread)) {
  for (GroupWorker* w : workers) watched_.push_back({w});
  thread_ = std::thread([this] { run(); });
}

void ProviderWatchdog::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ProviderWatchdog::run() {
  pthread_setname_np(pthread_self(), "fl-watchdog");
  // A tenth of the timeout between looks, within [5 ms, 250 ms]: a stuck call is noticed within
  // 1.1 timeouts, and the thread costs nothing measurable.
  const auto tick = std::chrono::nanoseconds(std::clamp<int64_t>(timeout_ns_ / 10, 5'000'000, 250'000'000));
  std::unique_lock lock(mu_);
  while (!cv_.wait_for(lock, tick, [this] { return stopping_; })) {
    const int64_t now = monotonic_ns();
    for (Watched& w : watched_) check(w, now);
  }
}

void ProviderWatchdog::check(Watched& w, int64_t now) {
  if (w.worker->abandoned()) {
    w.worker->fail_orphans();  // a submit may have raced with the take-over
    return;
  }
  const uint64_t sample = w.worker->call_guard().sample();
  if (sample != w.last_sample || (sample & 1) == 0) {
    w.last_sample = sample;
    w.since_ns = now;
    return;
  }
  if (now - w.since_ns < timeout_ns_) return;
  if (!w.worker->call_guard().try_abandon(sample)) return;  // the call just returned
  stats_.groups_abandoned.fetch_add(1, std::memory_order_relaxed);
  // First: if the stuck thread is the one that runs callbacks, the failures below need another.
  if (on_stuck_thread_) on_stuck_thread_(w.worker->call_guard().stuck_thread());
  const auto seconds = std::to_string((now - w.since_ns) / 1'000'000'000.0);
  w.worker->take_over_stuck(Status(ErrorCode::kProviderError,
                                   "the provider has not returned from a call for " + seconds.substr(0, seconds.find('.') + 2) +
                                       " s (stall_timeout); this group's worker is given up on: its requests fail, "
                                       "later ones fail at once, and a new engine is needed for this group"));
}

}  // namespace fabric_lib::detail

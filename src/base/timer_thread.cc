#include "base/timer_thread.h"

#include <pthread.h>

#include <chrono>
#include <vector>

#include "base/clock.h"

namespace fabric_lib {

TimerThread::~TimerThread() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void TimerThread::schedule(int64_t when_ns, std::function<void()> fn) {
  std::lock_guard lock(mu_);
  const std::optional<int64_t> before = queue_.next_ns();
  queue_.schedule(when_ns, std::move(fn));
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  if (!before || when_ns < *before) cv_.notify_all();  // the sleeper must wake earlier
}

size_t TimerThread::pending() const {
  std::lock_guard lock(mu_);
  return queue_.size();
}

void TimerThread::run() {
  pthread_setname_np(pthread_self(), "fl-timer");
  std::unique_lock lock(mu_);
  std::vector<std::function<void()>> due;
  while (!stopping_) {
    const std::optional<int64_t> next = queue_.next_ns();
    if (!next) {
      cv_.wait(lock);
      continue;
    }
    const int64_t now = monotonic_ns();
    if (*next > now) {
      cv_.wait_for(lock, std::chrono::nanoseconds(*next - now));
      continue;
    }
    queue_.pop_due(now, [&](std::function<void()> fn) { due.push_back(std::move(fn)); });
    lock.unlock();
    for (auto& fn : due) fn();  // without the lock: they may schedule
    due.clear();
    lock.lock();
  }
}

}  // namespace fabric_lib

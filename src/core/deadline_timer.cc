#include "core/deadline_timer.h"

#include <pthread.h>

namespace fabric_lib::detail {

DeadlineTimer::~DeadlineTimer() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

DeadlineTimer::Id DeadlineTimer::schedule(Clock::time_point when, std::function<void()> fn) {
  std::lock_guard lock(mu_);
  const Id id = next_id_++;
  queue_.emplace(std::make_pair(when, id), std::move(fn));
  when_.emplace(id, when);
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  cv_.notify_all();
  return id;
}

bool DeadlineTimer::cancel(Id id) {
  std::lock_guard lock(mu_);
  auto it = when_.find(id);
  if (it == when_.end()) return false;
  queue_.erase({it->second, id});
  when_.erase(it);
  return true;
}

size_t DeadlineTimer::pending() const {
  std::lock_guard lock(mu_);
  return queue_.size();
}

void DeadlineTimer::run() {
  pthread_setname_np(pthread_self(), "fl-timer");
  std::unique_lock lock(mu_);
  while (!stopping_) {
    if (queue_.empty()) {
      cv_.wait(lock);
      continue;
    }
    auto first = queue_.begin();
    if (first->first.first > Clock::now()) {
      // A copy: wait_until reads its deadline again after waking, when cancel() may have erased
      // the entry (heap-use-after-free under ASan, found by the KV cancel test).
      const Clock::time_point when = first->first.first;
      cv_.wait_until(lock, when);
      continue;
    }
    std::function<void()> fn = std::move(first->second);
    when_.erase(first->first.second);
    queue_.erase(first);
    lock.unlock();
    fn();  // without the lock: it may schedule or cancel
    lock.lock();
  }
}

}  // namespace fabric_lib::detail

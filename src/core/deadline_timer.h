// A small timer thread: runs callbacks at deadlines, cancellable. Used for imm expectations with
// deadlines (the ImmCounter is not owned by any worker). The thread starts on first use.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

namespace fabric_lib::detail {

class DeadlineTimer {
 public:
  using Clock = std::chrono::steady_clock;
  using Id = uint64_t;

  DeadlineTimer() = default;
  ~DeadlineTimer();
  DeadlineTimer(const DeadlineTimer&) = delete;
  DeadlineTimer& operator=(const DeadlineTimer&) = delete;

  // Runs `fn` on the timer thread at `when` (at once if it has passed), unless cancelled first.
  Id schedule(Clock::time_point when, std::function<void()> fn);
  // True when the callback was removed before it started.
  bool cancel(Id id);
  size_t pending() const;

 private:
  void run();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::pair<Clock::time_point, Id>, std::function<void()>> queue_;
  std::unordered_map<Id, Clock::time_point> when_;
  Id next_id_ = 1;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace fabric_lib::detail

// TimerThread: a DeadlineQueue (deadline_queue.h) of callbacks driven by a thread of its own, for
// deadlines that belong to no worker (the ImmCounter's expectations). The thread starts with the
// first schedule() and sleeps until the earliest deadline; callbacks run on it without the lock
// and must be quick (they validate their target and end it). Destruction joins the thread; a
// callback not yet due is dropped.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

#include "base/deadline_queue.h"

namespace fabric_lib {

class TimerThread {
 public:
  TimerThread() = default;
  ~TimerThread();
  TimerThread(const TimerThread&) = delete;
  TimerThread& operator=(const TimerThread&) = delete;

  // Runs `fn` on the timer thread at `when_ns` (monotonic_ns; at once if it has passed).
  void schedule(int64_t when_ns, std::function<void()> fn);
  size_t pending() const;

 private:
  void run();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  DeadlineQueue<std::function<void()>> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace fabric_lib

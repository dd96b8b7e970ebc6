// The engine's callback thread: user callbacks (completions, receives, imm observers) run here,
// never on a worker, so a slow callback cannot stall the network.
#pragma once

#include <concurrentqueue/blockingconcurrentqueue.h>

#include <atomic>
#include <functional>
#include <thread>

#include "fabric_lib/completion.h"

namespace fabric_lib::detail {

class CompletionDispatcher {
 public:
  CompletionDispatcher();
  ~CompletionDispatcher();
  CompletionDispatcher(const CompletionDispatcher&) = delete;
  CompletionDispatcher& operator=(const CompletionDispatcher&) = delete;

  // Runs `fn` on the callback thread (inline once the thread has shut down). Exceptions thrown
  // by `fn` are logged and swallowed.
  void post(std::function<void()> fn);
  // Ends `completion` with `status`: counters are bumped right here, callbacks are posted, and a
  // failure reported to nobody is logged.
  void deliver(Completion completion, const Status& status);

  bool on_callback_thread() const { return std::this_thread::get_id() == thread_.get_id(); }
  // Runs everything queued so far, then stops the thread. Idempotent; not from the callback thread.
  void shutdown();

 private:
  void run();
  void drain();
  static void run_guarded(std::function<void()>& fn);

  moodycamel::BlockingConcurrentQueue<std::function<void()>> queue_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> stopped_{false};
  std::thread thread_;
};

}  // namespace fabric_lib::detail

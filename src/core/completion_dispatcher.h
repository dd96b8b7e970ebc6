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
  // A completion callback with its status, or a task.
  struct Item {
    CompletionCallback callback;
    Status status;
    std::function<void()> task;
  };
  void enqueue(Item item);
  void run();
  void drain();
  static void run_guarded(Item& item);

  moodycamel::BlockingConcurrentQueue<Item> queue_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> stopped_{false};
  std::thread thread_;
};

}  // namespace fabric_lib::detail

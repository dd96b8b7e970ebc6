// The engine's callback thread: user callbacks (completions, receives, imm observers) run here,
// never on a worker, so a slow callback cannot stall the network.
#pragma once

#include <concurrentqueue/blockingconcurrentqueue.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <vector>
#include <mutex>
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

  bool on_callback_thread() const { return std::this_thread::get_id() == thread_id_.load(std::memory_order_acquire); }
  // The provider watchdog gave a group up while the thread `stuck` (a ProviderCallGuard token)
  // was inside one of its calls. If that is the callback thread (it reaps, and runs callbacks
  // that submit), it never comes back: a new thread takes the queue over and the old one is left
  // behind, so callbacks — the failures of that group's requests among them — keep running.
  void replace_if_stuck(uintptr_t stuck);
  // While callbacks flow, the callback thread reaps completions itself: after running a batch it
  // calls `reap` (TransferEngine::progress) until nothing more came for kReapBudget, then parks.
  // A completion whose callback submits the next request then costs no hop through the worker
  // (the worker stands by while a thread drives progress). `reap` returns the events it handled;
  // `parked` is called when the thread stops reaping (quiet for kReapBudget), so the workers take
  // the polling back at once rather than after their stand-by window. Set once, after the
  // workers started (the thread reads them from then on).
  void set_reaper(std::function<size_t()> reap, std::function<void()> parked);
  static constexpr std::chrono::microseconds kReapBudget{100};
  // Stops the reaping for good (the engine that set it is being destroyed from one of this
  // thread's callbacks, and the thread outlives it). On the callback thread only.
  void clear_reaper();
  // Runs everything queued so far, then stops the thread. Idempotent; not from the callback thread.
  void shutdown();

 private:
  // A completion callback with its status, or a task.
  struct Item {
    CompletionCallback callback;
    Status status;
    std::function<void()> task;
  };
  // The items a callback thread took from the queue, and how far it ran them.
  struct Batch {
    static constexpr size_t kItems = 64;
    std::vector<Item> items = std::vector<Item>(kItems);
    size_t size = 0;
    std::atomic<size_t> next{0};
  };
  Batch* current_batch();
  void enqueue(Item item);
  void run();
  void drain();
  static void run_guarded(Item& item);

  // Runs `reap` while it finds events or callbacks keep coming, for up to kReapBudget after the
  // last of them; returns when the queue has items again or the budget is spent.
  void reap_while_busy();

  moodycamel::BlockingConcurrentQueue<Item> queue_;
  std::function<size_t()> reap_;
  std::function<void()> parked_;
  std::atomic<bool> reaping_{false};  // reap_ is set (release); read by the callback thread
  std::atomic<bool> stopping_{false};
  std::atomic<bool> stopped_{false};
  std::mutex thread_mu_;  // thread_ (replace_if_stuck and shutdown)
  std::thread thread_;
  std::atomic<std::thread::id> thread_id_{};
  std::atomic<uintptr_t> thread_token_{0};  // the running callback thread's ProviderCallGuard token
  // The running thread's batch is the last; earlier ones belong to threads left behind (kept).
  std::vector<std::unique_ptr<Batch>> batches_ = [] {
    std::vector<std::unique_ptr<Batch>> b;
    b.push_back(std::make_unique<Batch>());
    return b;
  }();
};

}  // namespace fabric_lib::detail

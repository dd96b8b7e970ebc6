#include "core/completion_dispatcher.h"

#include <pthread.h>

#include <exception>
#include <vector>

#include "base/log.h"
#include "core/completion_delivery.h"

namespace fabric_lib::detail {

CompletionDispatcher::CompletionDispatcher() : thread_([this] { run(); }) {}

CompletionDispatcher::~CompletionDispatcher() {
  if (on_callback_thread()) {
    // Destroyed from one of its own callbacks: the thread cannot join itself.
    FL_LOG_ERROR("engine destroyed from its own callback thread; detaching it");
    stopping_ = true;
    thread_.detach();
    return;
  }
  shutdown();
}

void CompletionDispatcher::run_guarded(Item& item) {
  try {
    if (item.callback) {
      item.callback(item.status);
    } else if (item.task) {
      item.task();
    }
  } catch (const std::exception& e) {
    FL_LOG_ERROR("a user callback threw: {}", e.what());
  } catch (...) {
    FL_LOG_ERROR("a user callback threw a non-standard exception");
  }
}

void CompletionDispatcher::run() {
  pthread_setname_np(pthread_self(), "fl-callbacks");
  // Items are taken in batches: one wake-up of this thread serves everything queued meanwhile.
  constexpr size_t kBatch = 64;
  std::vector<Item> items(kBatch);
  while (true) {
    size_t n = queue_.try_dequeue_bulk(items.begin(), kBatch);
    if (n == 0) n = queue_.wait_dequeue_bulk_timed(items.begin(), kBatch, std::chrono::milliseconds(50));
    for (size_t i = 0; i < n; ++i) {
      run_guarded(items[i]);
      items[i] = Item{};  // the callback's captures go now, on this thread
    }
    if (n > 0 && !stopping_.load(std::memory_order_acquire)) reap_while_busy();
    if (n == 0 && stopping_.load(std::memory_order_acquire) && queue_.size_approx() == 0) break;
  }
}

void CompletionDispatcher::set_reaper(std::function<size_t()> reap) {
  reap_ = std::move(reap);
  reaping_.store(static_cast<bool>(reap_), std::memory_order_release);
}

void CompletionDispatcher::reap_while_busy() {
  if (!reaping_.load(std::memory_order_acquire)) return;
  using Clock = std::chrono::steady_clock;
  Clock::time_point last = Clock::now();
  while (queue_.size_approx() == 0 && !stopping_.load(std::memory_order_relaxed)) {
    if (reap_() > 0) {
      last = Clock::now();
    } else if (Clock::now() - last >= kReapBudget) {
      return;  // quiet: park, and leave the reaping to the worker
    }
  }
}

void CompletionDispatcher::enqueue(Item item) {
  if (stopped_.load(std::memory_order_acquire)) {
    run_guarded(item);
    return;
  }
  queue_.enqueue(std::move(item));
  // shutdown() sets stopped_ after joining the thread and before its final drain: if we see it
  // now, our item may have missed that drain, so run what is queued here.
  if (stopped_.load(std::memory_order_acquire)) drain();
}

void CompletionDispatcher::post(std::function<void()> fn) { enqueue(Item{nullptr, Status(), std::move(fn)}); }

void CompletionDispatcher::drain() {
  Item item;
  while (queue_.try_dequeue(item)) run_guarded(item);
}

void CompletionDispatcher::deliver(Completion completion, const Status& status) {
  switch (completion.kind()) {
    case Completion::Kind::kNone:
      if (!status.ok() && status.code() != ErrorCode::kCancelled) {
        FL_LOG_WARN("operation without a completion sink failed: {}", status.to_string());
      }
      return;
    case Completion::Kind::kCounter:
    case Completion::Kind::kFlag:
    case Completion::Kind::kQueue:
      CompletionDelivery::deliver_inline(completion, status);
      return;
    case Completion::Kind::kCallback:
      // The callback itself travels (no wrapper to allocate); it runs with the status there.
      enqueue(Item{CompletionDelivery::take_callback(completion), status, nullptr});
      return;
  }
}

void CompletionDispatcher::shutdown() {
  if (!thread_.joinable()) return;
  stopping_.store(true, std::memory_order_release);
  queue_.enqueue(Item{});  // wakes the thread now rather than at its next timed check
  thread_.join();
  stopped_.store(true, std::memory_order_release);
  drain();  // anything posted between the thread's last look and its exit
}

}  // namespace fabric_lib::detail

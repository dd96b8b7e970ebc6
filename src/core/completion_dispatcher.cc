#include "core/completion_dispatcher.h"

#include <pthread.h>

#include <exception>
#include <vector>

#include "base/log.h"
#include "core/completion_delivery.h"
#include "transport/guard/provider_call_guard.h"

namespace fabric_lib::detail {

CompletionDispatcher::CompletionDispatcher() {
  std::lock_guard lock(thread_mu_);
  thread_ = std::thread([this] { run(); });
  thread_id_.store(thread_.get_id(), std::memory_order_release);
}

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

void CompletionDispatcher::replace_if_stuck(uintptr_t stuck) {
  std::lock_guard lock(thread_mu_);
  if (stuck == 0 || stuck != thread_token_.load(std::memory_order_acquire) || !thread_.joinable()) return;
  FL_LOG_ERROR("the callback thread is stuck inside a provider call (its group was given up on); a new one takes over");
  thread_token_.store(0, std::memory_order_release);
  thread_.detach();  // it parks for good if the call ever returns (ProviderCallGuard)
  // The new thread gets a batch of its own, holding what the stuck one had not run yet (it was
  // reaping after its batch, or stuck in one of the batch's callbacks); the stuck thread keeps
  // its batch (it holds a callback of it on its stack), never freed.
  Batch& old = *batches_.back();
  auto fresh = std::make_unique<Batch>();
  const size_t from = old.next.load(std::memory_order_acquire);
  for (size_t i = from; i < old.size; ++i) fresh->items[i - from] = std::move(old.items[i]);
  fresh->size = old.size > from ? old.size - from : 0;
  batches_.push_back(std::move(fresh));
  thread_ = std::thread([this] { run(); });
  thread_id_.store(thread_.get_id(), std::memory_order_release);
}

void CompletionDispatcher::run() {
  pthread_setname_np(pthread_self(), "fl-callbacks");
  thread_token_.store(transport::ProviderCallGuard::thread_token(), std::memory_order_release);
  // Items are taken in batches: one wake-up of this thread serves everything queued meanwhile.
  // The batch is the dispatcher's (batch_), and batch_next_ says how far it ran: a thread that
  // replaces one stuck in a callback (replace_if_stuck) finishes the rest of it first.
  Batch* batch = current_batch();
  while (true) {
    size_t n = batch->size;
    if (batch->next.load(std::memory_order_acquire) >= n) {
      n = queue_.try_dequeue_bulk(batch->items.begin(), Batch::kItems);
      if (n == 0) n = queue_.wait_dequeue_bulk_timed(batch->items.begin(), Batch::kItems, std::chrono::milliseconds(50));
      batch->size = n;
      batch->next.store(0, std::memory_order_release);
    }
    for (size_t i = batch->next.load(std::memory_order_relaxed); i < n; i = batch->next.load(std::memory_order_relaxed)) {
      batch->next.store(i + 1, std::memory_order_release);  // before it runs: a stuck callback is not run twice
      run_guarded(batch->items[i]);
      batch->items[i] = Item{};  // the callback's captures go now, on this thread
    }
    if (n > 0 && !stopping_.load(std::memory_order_acquire)) reap_while_busy();
    if (n == 0 && stopping_.load(std::memory_order_acquire) && queue_.size_approx() == 0) break;
  }
}

CompletionDispatcher::Batch* CompletionDispatcher::current_batch() {
  std::lock_guard lock(thread_mu_);
  return batches_.back().get();
}

void CompletionDispatcher::set_reaper(std::function<size_t()> reap, std::function<void()> parked) {
  reap_ = std::move(reap);
  parked_ = std::move(parked);
  reaping_.store(static_cast<bool>(reap_), std::memory_order_release);
}

void CompletionDispatcher::clear_reaper() {
  reaping_.store(false, std::memory_order_release);
  reap_ = nullptr;
  parked_ = nullptr;
}

void CompletionDispatcher::reap_while_busy() {
  if (!reaping_.load(std::memory_order_acquire)) return;
  using Clock = std::chrono::steady_clock;
  Clock::time_point last = Clock::now();
  while (queue_.size_approx() == 0 && !stopping_.load(std::memory_order_relaxed)) {
    if (reap_() > 0) {
      last = Clock::now();
    } else if (Clock::now() - last >= kReapBudget) {
      // Quiet: park, and leave the reaping to the workers — now. A worker standing by for a
      // polling thread resumes only after IdleWaiter::kSpinBudget without a progress() call:
      // a submit arriving meanwhile (asyncio answering the callback that just ran) waited for
      // it (ipc host memory, Python asyncio: 380-420 us from submit to callback, against ~110
      // with a thread waiting on an event).
      if (parked_) parked_();
      return;
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
    case Completion::Kind::kInline:
      CompletionDelivery::deliver_inline(completion, status);
      return;
    case Completion::Kind::kCallback:
      // The callback itself travels (no wrapper to allocate); it runs with the status there.
      enqueue(Item{CompletionDelivery::take_callback(completion), status, nullptr});
      return;
  }
}

void CompletionDispatcher::shutdown() {
  std::unique_lock lock(thread_mu_);
  if (!thread_.joinable()) return;
  stopping_.store(true, std::memory_order_release);
  queue_.enqueue(Item{});  // wakes the thread now rather than at its next timed check
  std::thread thread = std::move(thread_);
  lock.unlock();  // a replace_if_stuck meanwhile finds no thread to replace
  thread.join();
  stopped_.store(true, std::memory_order_release);
  drain();  // anything posted between the thread's last look and its exit
}

}  // namespace fabric_lib::detail

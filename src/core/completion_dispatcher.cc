#include "core/completion_dispatcher.h"

#include <pthread.h>

#include <exception>

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

void CompletionDispatcher::run_guarded(std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    FL_LOG_ERROR("a user callback threw: {}", e.what());
  } catch (...) {
    FL_LOG_ERROR("a user callback threw a non-standard exception");
  }
}

void CompletionDispatcher::run() {
  pthread_setname_np(pthread_self(), "fl-callbacks");
  std::function<void()> fn;
  while (true) {
    if (queue_.wait_dequeue_timed(fn, std::chrono::milliseconds(50))) {
      run_guarded(fn);
      fn = nullptr;
      continue;
    }
    if (stopping_.load(std::memory_order_acquire) && queue_.size_approx() == 0) break;
  }
}

void CompletionDispatcher::post(std::function<void()> fn) {
  if (stopped_.load(std::memory_order_acquire)) {
    run_guarded(fn);
    return;
  }
  queue_.enqueue(std::move(fn));
  // shutdown() sets stopped_ after joining the thread and before its final drain: if we see it
  // now, our item may have missed that drain, so run what is queued here.
  if (stopped_.load(std::memory_order_acquire)) drain();
}

void CompletionDispatcher::drain() {
  std::function<void()> fn;
  while (queue_.try_dequeue(fn)) run_guarded(fn);
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
      CompletionDelivery::deliver_inline(completion, status);
      return;
    case Completion::Kind::kCallback: {
      post([fn = CompletionDelivery::take_callback(completion), status]() mutable {
        if (fn) fn(status);
      });
      return;
    }
  }
}

void CompletionDispatcher::shutdown() {
  if (!thread_.joinable()) return;
  stopping_.store(true, std::memory_order_release);
  queue_.enqueue([] {});  // wakes the thread now rather than at its next timed check
  thread_.join();
  stopped_.store(true, std::memory_order_release);
  drain();  // anything posted between the thread's last look and its exit
}

}  // namespace fabric_lib::detail

#include "fabric_lib/completion.h"

#include "base/cpu_relax.h"
#include "core/completion_delivery.h"

#include <concurrentqueue/concurrentqueue.h>

#include <thread>

namespace fabric_lib {

bool CompletionCounter::wait_for(uint64_t n, std::chrono::milliseconds timeout) const {
  if (finished() >= n) return true;
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto deadline = start + timeout;
  // Spin first (a completion usually comes within microseconds), then yield the core, and only
  // after a long wait sleep in short steps: reaction stays in the microseconds without burning a
  // core through a wait of seconds.
  constexpr auto kSpin = std::chrono::microseconds(50);
  constexpr auto kYield = std::chrono::milliseconds(5);
  constexpr auto kSleep = std::chrono::microseconds(50);
  for (uint32_t i = 0;; ++i) {
    if (finished() >= n) return true;
    if ((i & 63) != 0) {
      cpu_relax();
      continue;
    }
    const auto now = Clock::now();
    if (now >= deadline) return finished() >= n;
    const auto waited = now - start;
    if (waited < kSpin) continue;
    if (waited < kYield) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(kSleep);
    }
  }
}

Completion Completion::callback(CompletionCallback fn) {
  Completion c;
  c.kind_ = fn ? Kind::kCallback : Kind::kNone;
  c.fn_ = std::move(fn);
  return c;
}

Completion Completion::inline_callback(CompletionCallback fn) {
  Completion c;
  c.kind_ = fn ? Kind::kInline : Kind::kNone;
  c.fn_ = std::move(fn);
  return c;
}

Completion Completion::counter(CompletionCounter& counter) {
  Completion c;
  c.kind_ = Kind::kCounter;
  c.counter_ = &counter;
  return c;
}

Completion Completion::flag(uint64_t* flag, uint64_t value, uint64_t error_value) {
  Completion c;
  c.kind_ = flag ? Kind::kFlag : Kind::kNone;
  c.flag_ = flag;
  c.flag_value_ = value;
  c.flag_error_value_ = error_value;
  return c;
}

Completion Completion::queue(CompletionQueue& queue, uint64_t tag) {
  Completion c;
  c.kind_ = Kind::kQueue;
  c.queue_ = &queue;
  c.flag_value_ = tag;
  return c;
}

struct CompletionQueue::Impl {
  moodycamel::ConcurrentQueue<Entry> entries;
};

CompletionQueue::CompletionQueue() : impl_(std::make_unique<Impl>()) {}
CompletionQueue::~CompletionQueue() = default;

void CompletionQueue::push(uint64_t tag, const Status& status) { impl_->entries.enqueue(Entry{tag, status}); }

size_t CompletionQueue::poll(Entry* out, size_t max) { return impl_->entries.try_dequeue_bulk(out, max); }

size_t CompletionQueue::size_approx() const { return impl_->entries.size_approx(); }

Completion&& Completion::with_deadline(Clock::time_point deadline) && {
  has_deadline_ = true;
  deadline_ = deadline;
  return std::move(*this);
}

Completion& Completion::with_deadline(Clock::time_point deadline) & {
  has_deadline_ = true;
  deadline_ = deadline;
  return *this;
}

void CompletionDelivery::deliver_inline(Completion& c, const Status& status) {
  switch (c.kind_) {
    case Completion::Kind::kNone:
      return;
    case Completion::Kind::kCallback:
    case Completion::Kind::kInline:
      if (c.fn_) c.fn_(status);
      return;
    case Completion::Kind::kCounter:
      (status.ok() ? c.counter_->done : c.counter_->errors).fetch_add(1, std::memory_order_acq_rel);
      return;
    case Completion::Kind::kFlag:
      __atomic_store_n(c.flag_, status.ok() ? c.flag_value_ : c.flag_error_value_, __ATOMIC_RELEASE);
      return;
    case Completion::Kind::kQueue:
      c.queue_->push(c.flag_value_, status);
      return;
  }
}

}  // namespace fabric_lib

namespace fabric_lib {

RepeatingSink RepeatingSink::callback(Callback fn) {
  RepeatingSink s;
  s.kind_ = fn ? Completion::Kind::kCallback : Completion::Kind::kNone;
  s.fn_ = std::move(fn);
  return s;
}

RepeatingSink RepeatingSink::counter(CompletionCounter& c) {
  RepeatingSink s;
  s.kind_ = Completion::Kind::kCounter;
  s.counter_ = &c;
  return s;
}

RepeatingSink RepeatingSink::flag(uint64_t* word, uint64_t error_value) {
  RepeatingSink s;
  s.kind_ = word ? Completion::Kind::kFlag : Completion::Kind::kNone;
  s.word_ = word;
  s.error_value_ = error_value;
  return s;
}

void CompletionDelivery::deliver_rounds(const RepeatingSink& sink, uint64_t first, uint64_t last, const Post& post) {
  switch (sink.kind_) {
    case Completion::Kind::kNone:
      return;
    case Completion::Kind::kCallback:
      for (uint64_t r = first; r <= last; ++r) post([fn = sink.fn_, r] { fn(r, ok_status()); });
      return;
    case Completion::Kind::kCounter:
      sink.counter_->done.fetch_add(last - first + 1, std::memory_order_acq_rel);
      return;
    case Completion::Kind::kFlag:
      __atomic_store_n(sink.word_, last, __ATOMIC_RELEASE);
      return;
    case Completion::Kind::kQueue:  // not repeating sink kinds
    case Completion::Kind::kInline:
      return;
  }
}

void CompletionDelivery::deliver_end(const RepeatingSink& sink, uint64_t rounds, const Status& status,
                                     const Post& post) {
  switch (sink.kind_) {
    case Completion::Kind::kNone:
      return;
    case Completion::Kind::kCallback:
      post([fn = sink.fn_, rounds, status] { fn(rounds, status); });
      return;
    case Completion::Kind::kCounter:
      sink.counter_->errors.fetch_add(1, std::memory_order_acq_rel);
      return;
    case Completion::Kind::kFlag:
      __atomic_store_n(sink.word_, sink.error_value_, __ATOMIC_RELEASE);
      return;
    case Completion::Kind::kQueue:
    case Completion::Kind::kInline:
      return;
  }
}

}  // namespace fabric_lib

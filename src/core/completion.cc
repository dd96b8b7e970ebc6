#include "fabric_lib/completion.h"

#include "core/completion_delivery.h"

#include <thread>

namespace fabric_lib {

bool CompletionCounter::wait_for(uint64_t n, std::chrono::milliseconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::microseconds(1);
  while (finished() < n) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
  return true;
}

Completion Completion::callback(CompletionCallback fn) {
  Completion c;
  c.kind_ = fn ? Kind::kCallback : Kind::kNone;
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
      if (c.fn_) c.fn_(status);
      return;
    case Completion::Kind::kCounter:
      (status.ok() ? c.counter_->done : c.counter_->errors).fetch_add(1, std::memory_order_acq_rel);
      return;
    case Completion::Kind::kFlag:
      __atomic_store_n(c.flag_, status.ok() ? c.flag_value_ : c.flag_error_value_, __ATOMIC_RELEASE);
      return;
  }
}

}  // namespace fabric_lib

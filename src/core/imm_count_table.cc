#include "core/imm_count_table.h"

#include <array>
#include <deque>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/clock.h"
#include "base/log.h"
#include "base/spinning_mutex.h"
#include "base/timer_thread.h"
#include "core/completion_delivery.h"
#include "core/completion_dispatcher.h"

namespace fabric_lib::detail {
namespace {

// A repeating expectation's sink. Its counter and flag are updated under the shard lock, so a
// flag never goes back to an older round and the end comes after every round; its callbacks are
// queued here under that lock and run in queue order by drain(): the callback thread's queue
// keeps no order between the threads (workers of several groups, a releasing caller) posting to it.
struct RepeatingReports {
  explicit RepeatingReports(RepeatingSink s) : sink(std::move(s)) {}
  RepeatingSink sink;
  std::mutex mu;
  std::deque<std::function<void()>> queue;
  bool draining = false;

  // Shard lock held. True when callbacks were queued (drain() must run).
  bool rounds(uint64_t first, uint64_t last) {
    bool queued = false;
    CompletionDelivery::deliver_rounds(sink, first, last, [&](std::function<void()> fn) { push(std::move(fn), queued); });
    return queued;
  }
  bool end(uint64_t fired, const Status& why) {
    bool queued = false;
    CompletionDelivery::deliver_end(sink, fired, why, [&](std::function<void()> fn) { push(std::move(fn), queued); });
    return queued;
  }
  void push(std::function<void()> fn, bool& queued) {
    std::lock_guard lock(mu);
    queue.push_back(std::move(fn));
    queued = true;
  }
  // Runs what is queued, in order; one drainer at a time (a callback counting imms inline, or a
  // drain posted by another thread, leaves the rest to the running one).
  void drain() {
    std::unique_lock lock(mu);
    if (draining) return;
    draining = true;
    while (!queue.empty()) {
      std::function<void()> fn = std::move(queue.front());
      queue.pop_front();
      lock.unlock();
      try {
        fn();
      } catch (const std::exception& e) {
        FL_LOG_ERROR("a repeating expectation's callback threw: {}", e.what());
      } catch (...) {
        FL_LOG_ERROR("a repeating expectation's callback threw");
      }
      lock.lock();
    }
    draining = false;
  }
};

struct Entry {
  uint64_t count = 0;
  bool expecting = false;
  uint64_t need = 0;
  Completion sink;                          // a one-shot expectation
  std::shared_ptr<RepeatingReports> every;  // or a repeating one (expect_every)
  uint64_t rounds = 0;                   // rounds the repeating one fired
  uint64_t expectation_id = 0;           // tells a timer which expectation it was set for
};

// What an add() or expect() fired, delivered after the shard's lock is released.
struct Fired {
  Completion once;
  bool fire_once = false;
  std::shared_ptr<RepeatingReports> drain;  // a repeating sink with callbacks queued
};

// Sharded by imm value so that workers of different groups rarely contend.
constexpr size_t kShards = 64;

struct Shard {
  // Spinning before it blocks: an application thread polling count() holds it for a few dozen
  // ns at a time, and the worker counting an arrival must not sleep behind that.
  mutable SpinningMutex mu;
  std::unordered_map<uint32_t, Entry> map;
};

}  // namespace

struct ImmCountTable::Impl {
  size_t capacity;
  CompletionDispatcher* dispatcher;
  std::array<Shard, kShards> shards;
  std::atomic<size_t> size{0};
  std::atomic<uint64_t> overflows{0};
  std::atomic<bool> shut{false};
  std::atomic<uint64_t> expectation_ids{0};

  std::mutex handlers_mu;
  std::atomic<bool> has_observer{false};
  std::shared_ptr<Observer> observer;
  std::shared_ptr<OverflowHandler> overflow_handler;
  // Last member: destroyed (and its thread joined) before anything its callbacks touch.
  TimerThread timer;

  Shard& shard_of(uint32_t imm) { return shards[(imm * 2654435761u) >> 26]; }
  const Shard& shard_of(uint32_t imm) const { return shards[(imm * 2654435761u) >> 26]; }

  // Reserves one table slot; false when the table is full.
  bool reserve_slot() {
    if (size.fetch_add(1, std::memory_order_acq_rel) >= capacity) {
      size.fetch_sub(1, std::memory_order_acq_rel);
      return false;
    }
    return true;
  }
  void free_slot() { size.fetch_sub(1, std::memory_order_acq_rel); }
  // Drops `it` when it holds nothing (shard lock held).
  void erase_if_empty(Shard& sh, std::unordered_map<uint32_t, Entry>::iterator it) {
    if (it->second.count == 0 && !it->second.expecting) {
      sh.map.erase(it);
      free_slot();
    }
  }

  // Consumes what the count of `e` allows and records what fired (shard lock held).
  static void consume(Entry& e, Fired& out) {
    if (!e.expecting || e.count < e.need) return;
    if (e.every) {
      const uint64_t rounds = e.count / e.need;
      e.count -= rounds * e.need;
      const uint64_t first = e.rounds + 1;
      e.rounds += rounds;
      if (e.every->rounds(first, e.rounds)) out.drain = e.every;
      return;
    }
    e.count -= e.need;
    e.expecting = false;
    out.once = std::move(e.sink);
    out.fire_once = true;
  }

  void deliver(Completion sink, const Status& status) {
    if (dispatcher) {
      dispatcher->deliver(std::move(sink), status);
    } else {
      CompletionDelivery::deliver_inline(sink, status);
    }
  }
  void run_user(std::function<void()> fn) {
    if (dispatcher) {
      dispatcher->post(std::move(fn));
    } else {
      fn();
    }
  }
  // Runs the queued callbacks of a repeating sink on the callback thread.
  void drain(std::shared_ptr<RepeatingReports> reports) {
    run_user([reports = std::move(reports)] { reports->drain(); });
  }
  void deliver_fired(Fired& f) {
    if (f.fire_once) deliver(std::move(f.once), ok_status());
    if (f.drain) drain(std::move(f.drain));
  }

  // Takes the pending expectation of `e` out (shard lock held) to end it with `why`: a repeating
  // one is ended here, under the lock (after all its rounds); end() delivers the rest unlocked.
  struct Ended {
    bool any = false;
    Completion once;
    bool repeating = false;
    std::shared_ptr<RepeatingReports> drain;
  };
  static Ended take_expectation(Entry& e, const Status& why) {
    Ended out;
    if (!e.expecting) return out;
    out.any = true;
    out.once = std::move(e.sink);
    if (e.every) {
      out.repeating = true;
      if (e.every->end(e.rounds, why)) out.drain = e.every;
    }
    e.expecting = false;
    e.every.reset();
    e.rounds = 0;
    return out;
  }
  void end(Ended& e, const Status& why) {
    if (!e.any) return;
    if (e.repeating) {
      if (e.drain) drain(std::move(e.drain));
    } else {
      deliver(std::move(e.once), why);
    }
  }

  // A deadline passed: ends expectation `id` of `imm` if it is still the pending one.
  void expire(uint32_t imm, uint64_t id) {
    Ended ended;
    std::string message;
    {
      Shard& sh = shard_of(imm);
      std::lock_guard lock(sh.mu);
      auto it = sh.map.find(imm);
      if (it == sh.map.end() || !it->second.expecting || it->second.expectation_id != id) return;
      Entry& e = it->second;
      message = "imm " + std::to_string(imm) + ": " + std::to_string(e.count) + " of " + std::to_string(e.need) +
                " arrived before the deadline";
      ended = take_expectation(e, Status(ErrorCode::kDeadlineExceeded, message));
      erase_if_empty(sh, it);
    }
    end(ended, Status(ErrorCode::kDeadlineExceeded, message));
  }

  void report_overflow(uint32_t imm, uint64_t n) {  // outside the lock: the handler may call back in
    overflows.fetch_add(n, std::memory_order_relaxed);
    Status why = resource_exhausted("imm table full (" + std::to_string(capacity) + " values); imm " +
                                    std::to_string(imm) + " dropped");
    FL_LOG_ERROR("{}", why.message());
    std::shared_ptr<OverflowHandler> handler;
    {
      std::lock_guard hl(handlers_mu);
      handler = overflow_handler;
    }
    if (handler) run_user([handler, imm, why] { (*handler)(imm, why); });
  }
  void observe(uint32_t imm, uint64_t n) {
    if (!has_observer.load(std::memory_order_acquire)) return;
    std::shared_ptr<Observer> obs;
    {
      std::lock_guard hl(handlers_mu);
      obs = observer;
    }
    if (obs) {
      run_user([obs, imm, n] {  // one task for a batch of arrivals
        for (uint64_t i = 0; i < n; ++i) (*obs)(imm);
      });
    }
  }

  // Registers a one-shot (sink) or repeating (every) expectation.
  Status expect(uint32_t imm, uint64_t n, Completion sink, std::shared_ptr<RepeatingReports> every) {
    if (n == 0) return invalid_argument("expect(): count must be >= 1");
    if (shut.load(std::memory_order_acquire)) return stopped("imm counter is shut down");
    Fired fired;
    {
      Shard& sh = shard_of(imm);
      std::lock_guard lock(sh.mu);
      auto it = sh.map.find(imm);
      if (it == sh.map.end()) {
        if (!reserve_slot()) return resource_exhausted("imm table full (" + std::to_string(capacity) + " values)");
        it = sh.map.emplace(imm, Entry{}).first;
      }
      Entry& e = it->second;
      if (e.expecting) return Status(ErrorCode::kAlreadyExists, "imm " + std::to_string(imm) + " already has an expectation");
      e.expecting = true;
      e.need = n;
      e.rounds = 0;
      e.expectation_id = expectation_ids.fetch_add(1) + 1;
      const bool has_deadline = !every && sink.has_deadline();
      const int64_t deadline = has_deadline ? to_monotonic_ns(sink.deadline()) : 0;
      e.sink = std::move(sink);
      e.every = std::move(every);
      consume(e, fired);
      if (e.expecting && has_deadline) {
        // The timer thread blocks on this shard's lock until we are done here.
        timer.schedule(deadline, [this, imm, id = e.expectation_id] { expire(imm, id); });
      }
      erase_if_empty(sh, it);
    }
    deliver_fired(fired);
    return ok_status();
  }
};

ImmCountTable::ImmCountTable(size_t capacity, CompletionDispatcher* dispatcher) : impl_(std::make_unique<Impl>()) {
  impl_->capacity = capacity == 0 ? 1 : capacity;
  impl_->dispatcher = dispatcher;
}

ImmCountTable::~ImmCountTable() = default;

Status ImmCountTable::add(uint32_t imm, uint64_t n) {
  Impl& s = *impl_;
  Fired fired;
  bool overflowed = false;
  {
    Shard& sh = s.shard_of(imm);
    std::lock_guard lock(sh.mu);
    auto it = sh.map.find(imm);
    if (it == sh.map.end()) {
      if (s.reserve_slot()) {
        it = sh.map.emplace(imm, Entry{}).first;
      } else {
        overflowed = true;
      }
    }
    if (!overflowed) {
      Entry& e = it->second;
      e.count += n;
      Impl::consume(e, fired);
      s.erase_if_empty(sh, it);
    }
  }
  if (overflowed) {
    s.report_overflow(imm, n);
    return resource_exhausted("imm table full (" + std::to_string(s.capacity) + " values); imm " +
                              std::to_string(imm) + " dropped");
  }
  s.deliver_fired(fired);
  s.observe(imm, n);
  return ok_status();
}

Status ImmCountTable::expect(uint32_t imm, uint64_t n, Completion sink) {
  return impl_->expect(imm, n, std::move(sink), nullptr);
}

Status ImmCountTable::expect_every(uint32_t imm, uint64_t n, RepeatingSink sink) {
  if (sink.is_none()) return invalid_argument("expect_every(): the sink reports to nobody");
  return impl_->expect(imm, n, Completion(), std::make_shared<RepeatingReports>(std::move(sink)));
}

uint64_t ImmCountTable::rounds(uint32_t imm) const {
  const Shard& sh = impl_->shard_of(imm);
  std::lock_guard lock(sh.mu);
  auto it = sh.map.find(imm);
  return it != sh.map.end() && it->second.expecting && it->second.every ? it->second.rounds : 0;
}

uint64_t ImmCountTable::count(uint32_t imm) const {
  const Shard& sh = impl_->shard_of(imm);
  std::lock_guard lock(sh.mu);
  auto it = sh.map.find(imm);
  return it == sh.map.end() ? 0 : it->second.count;
}

bool ImmCountTable::has_expectation(uint32_t imm) const {
  const Shard& sh = impl_->shard_of(imm);
  std::lock_guard lock(sh.mu);
  auto it = sh.map.find(imm);
  return it != sh.map.end() && it->second.expecting;
}

Status ImmCountTable::release(uint32_t imm) {
  Impl& s = *impl_;
  Impl::Ended ended;
  const Status why = cancelled("imm " + std::to_string(imm) + " released");
  {
    Shard& sh = s.shard_of(imm);
    std::lock_guard lock(sh.mu);
    auto it = sh.map.find(imm);
    if (it == sh.map.end()) return not_found("imm " + std::to_string(imm) + " is not known");
    ended = Impl::take_expectation(it->second, why);
    sh.map.erase(it);
    s.free_slot();
  }
  s.end(ended, why);
  return ok_status();
}

Status ImmCountTable::cancel_expectation(uint32_t imm) {
  Impl& s = *impl_;
  Impl::Ended ended;
  const Status why = cancelled("expectation of imm " + std::to_string(imm) + " cancelled");
  {
    Shard& sh = s.shard_of(imm);
    std::lock_guard lock(sh.mu);
    auto it = sh.map.find(imm);
    if (it == sh.map.end() || !it->second.expecting) return not_found("imm " + std::to_string(imm) + " has no expectation");
    ended = Impl::take_expectation(it->second, why);
    s.erase_if_empty(sh, it);
  }
  s.end(ended, why);
  return ok_status();
}

uint64_t ImmCountTable::expected(uint32_t imm) const {
  const Shard& sh = impl_->shard_of(imm);
  std::lock_guard lock(sh.mu);
  auto it = sh.map.find(imm);
  return it != sh.map.end() && it->second.expecting ? it->second.need : 0;
}

void ImmCountTable::shutdown(const Status& why) {
  Impl& s = *impl_;
  s.shut.store(true, std::memory_order_release);
  std::vector<Impl::Ended> ended;
  for (Shard& sh : s.shards) {
    std::lock_guard lock(sh.mu);
    for (auto it = sh.map.begin(); it != sh.map.end();) {
      if (it->second.expecting) ended.push_back(Impl::take_expectation(it->second, why));
      if (it->second.count == 0) {
        it = sh.map.erase(it);
        s.free_slot();
      } else {
        ++it;
      }
    }
  }
  for (Impl::Ended& e : ended) s.end(e, why);
}

void ImmCountTable::set_observer(Observer observer) {
  std::lock_guard hl(impl_->handlers_mu);
  impl_->observer = observer ? std::make_shared<Observer>(std::move(observer)) : nullptr;
  impl_->has_observer.store(impl_->observer != nullptr, std::memory_order_release);
}

void ImmCountTable::set_overflow_handler(OverflowHandler handler) {
  std::lock_guard hl(impl_->handlers_mu);
  impl_->overflow_handler = handler ? std::make_shared<OverflowHandler>(std::move(handler)) : nullptr;
}

uint64_t ImmCountTable::overflow_count() const { return impl_->overflows.load(std::memory_order_relaxed); }
size_t ImmCountTable::size() const { return impl_->size.load(std::memory_order_relaxed); }
size_t ImmCountTable::capacity() const { return impl_->capacity; }

}  // namespace fabric_lib::detail

#include "core/imm_count_table.h"

#include <array>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/completion_dispatcher.h"
#include "base/clock.h"
#include "base/timer_thread.h"
#include "core/completion_delivery.h"
#include "base/log.h"

namespace fabric_lib::detail {
namespace {

struct Entry {
  uint64_t count = 0;
  bool expecting = false;
  uint64_t need = 0;
  Completion sink;
  uint64_t expectation_id = 0;          // tells a timer which expectation it was set for
};

// Sharded by imm value so that workers of different groups rarely contend.
constexpr size_t kShards = 64;

struct Shard {
  mutable std::mutex mu;
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

  void deliver(Completion sink, const Status& status) {
    if (dispatcher) {
      dispatcher->deliver(std::move(sink), status);
    } else {
      CompletionDelivery::deliver_inline(sink, status);
    }
  }
  // A deadline passed: ends expectation `id` of `imm` if it is still the pending one.
  void expire(uint32_t imm, uint64_t id) {
    Completion sink;
    std::string message;
    {
      Shard& sh = shard_of(imm);
      std::lock_guard lock(sh.mu);
      auto it = sh.map.find(imm);
      if (it == sh.map.end() || !it->second.expecting || it->second.expectation_id != id) return;
      Entry& e = it->second;
      sink = std::move(e.sink);
      e.expecting = false;
      message = "imm " + std::to_string(imm) + ": " + std::to_string(e.count) + " of " + std::to_string(e.need) +
                " arrived before the deadline";
      if (e.count == 0) {
        sh.map.erase(it);
        free_slot();
      }
    }
    deliver(std::move(sink), Status(ErrorCode::kDeadlineExceeded, message));
  }

  void run_user(std::function<void()> fn) {
    if (dispatcher) {
      dispatcher->post(std::move(fn));
    } else {
      fn();
    }
  }
};

ImmCountTable::ImmCountTable(size_t capacity, CompletionDispatcher* dispatcher) : impl_(std::make_unique<Impl>()) {
  impl_->capacity = capacity == 0 ? 1 : capacity;
  impl_->dispatcher = dispatcher;
}

ImmCountTable::~ImmCountTable() = default;

Status ImmCountTable::add(uint32_t imm, uint64_t n) {
  Impl& s = *impl_;
  Completion fired;
  bool fire = false;
  bool overflowed = false;
  {
    Shard& sh = s.shard_of(imm);
    std::lock_guard lock(sh.mu);
    auto it = sh.map.find(imm);
    if (it == sh.map.end()) {
      if (!s.reserve_slot()) {
        overflowed = true;
      } else {
        it = sh.map.emplace(imm, Entry{}).first;
      }
    }
    if (!overflowed) {
      Entry& e = it->second;
      e.count += n;
      if (e.expecting && e.count >= e.need) {
        e.count -= e.need;
        e.expecting = false;
        fired = std::move(e.sink);
        fire = true;
      }
      if (e.count == 0 && !e.expecting) {
        sh.map.erase(it);
        s.free_slot();
      }
    }
  }
  if (overflowed) {  // reported outside the lock: the handler may call back into the counter
    s.overflows.fetch_add(n, std::memory_order_relaxed);
    Status why = resource_exhausted("imm table full (" + std::to_string(s.capacity) + " values); imm " +
                                    std::to_string(imm) + " dropped");
    FL_LOG_ERROR("{}", why.message());
    std::shared_ptr<OverflowHandler> handler;
    {
      std::lock_guard hl(s.handlers_mu);
      handler = s.overflow_handler;
    }
    if (handler) s.run_user([handler, imm, why] { (*handler)(imm, why); });
    return why;
  }
  if (fire) s.deliver(std::move(fired), ok_status());
  if (s.has_observer.load(std::memory_order_acquire)) {
    std::shared_ptr<Observer> obs;
    {
      std::lock_guard hl(s.handlers_mu);
      obs = s.observer;
    }
    if (obs) {
      for (uint64_t i = 0; i < n; ++i) s.run_user([obs, imm] { (*obs)(imm); });
    }
  }
  return ok_status();
}

Status ImmCountTable::expect(uint32_t imm, uint64_t n, Completion sink) {
  Impl& s = *impl_;
  if (n == 0) return invalid_argument("expect(): count must be >= 1");
  if (s.shut.load(std::memory_order_acquire)) return stopped("imm counter is shut down");
  bool fire = false;
  {
    Shard& sh = s.shard_of(imm);
    std::lock_guard lock(sh.mu);
    auto it = sh.map.find(imm);
    if (it == sh.map.end()) {
      if (!s.reserve_slot()) {
        return resource_exhausted("imm table full (" + std::to_string(s.capacity) + " values)");
      }
      it = sh.map.emplace(imm, Entry{}).first;
    }
    Entry& e = it->second;
    if (e.expecting) return Status(ErrorCode::kAlreadyExists, "imm " + std::to_string(imm) + " already has an expectation");
    if (e.count >= n) {
      e.count -= n;
      fire = true;
      if (e.count == 0) {
        sh.map.erase(it);
        s.free_slot();
      }
    } else {
      e.expecting = true;
      e.need = n;
      e.expectation_id = s.expectation_ids.fetch_add(1) + 1;
      if (sink.has_deadline()) {
        // The timer thread blocks on this shard's lock until we are done here.
        Impl* impl = &s;
        s.timer.schedule(to_monotonic_ns(sink.deadline()), [impl, imm, id = e.expectation_id] { impl->expire(imm, id); });
      }
      e.sink = std::move(sink);
    }
  }
  if (fire) s.deliver(std::move(sink), ok_status());
  return ok_status();
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
  Completion sink;
  bool had_expectation = false;
  {
    Shard& sh = s.shard_of(imm);
    std::lock_guard lock(sh.mu);
    auto it = sh.map.find(imm);
    if (it == sh.map.end()) return not_found("imm " + std::to_string(imm) + " is not known");
    if (it->second.expecting) {
      sink = std::move(it->second.sink);
      had_expectation = true;
    }
    sh.map.erase(it);
    s.free_slot();
  }
  if (had_expectation) s.deliver(std::move(sink), cancelled("imm " + std::to_string(imm) + " released"));
  return ok_status();
}

Status ImmCountTable::cancel_expectation(uint32_t imm) {
  Impl& s = *impl_;
  Completion sink;
  {
    Shard& sh = s.shard_of(imm);
    std::lock_guard lock(sh.mu);
    auto it = sh.map.find(imm);
    if (it == sh.map.end() || !it->second.expecting) return not_found("imm " + std::to_string(imm) + " has no expectation");
    sink = std::move(it->second.sink);
    it->second.expecting = false;
    if (it->second.count == 0) {
      sh.map.erase(it);
      s.free_slot();
    }
  }
  s.deliver(std::move(sink), cancelled("expectation of imm " + std::to_string(imm) + " cancelled"));
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
  std::vector<Completion> sinks;
  for (Shard& sh : s.shards) {
    std::lock_guard lock(sh.mu);
    for (auto it = sh.map.begin(); it != sh.map.end();) {
      if (it->second.expecting) {
        sinks.push_back(std::move(it->second.sink));
        it->second.expecting = false;
      }
      if (it->second.count == 0) {
        it = sh.map.erase(it);
        s.free_slot();
      } else {
        ++it;
      }
    }
  }
  for (Completion& c : sinks) s.deliver(std::move(c), why);
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

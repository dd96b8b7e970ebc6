#include "core/uvm_watcher_hub.h"

#include <pthread.h>
#include <sched.h>

#include <cstring>
#include <exception>

#include "base/cpu_relax.h"
#include "base/log.h"

namespace fabric_lib::detail {

std::shared_ptr<UvmWatcherHub> UvmWatcherHub::create(Options options) {
  return std::shared_ptr<UvmWatcherHub>(new UvmWatcherHub(options));
}

UvmWatcherHub::~UvmWatcherHub() { stop(); }

Result<uint64_t> UvmWatcherHub::watch(const uint64_t* word, WatchCallback callback) {
  if (!word) return invalid_argument("watch: null word");
  if (reinterpret_cast<uintptr_t>(word) % alignof(uint64_t) != 0) return invalid_argument("watch: word not 8-byte aligned");
  if (!callback) return invalid_argument("watch: no callback");
  std::lock_guard lock(mu_);
  if (stopping_) return stopped("engine stopped");
  Command c;
  c.add = true;
  c.entry.id = next_id_++;
  c.entry.word = word;
  c.entry.last = __atomic_load_n(word, __ATOMIC_ACQUIRE);
  c.entry.callback = std::move(callback);
  const uint64_t id = c.entry.id;
  pending_.push_back(std::move(c));
  queued_hint_.store(++queued_seq_, std::memory_order_release);
  if (!running_) {
    running_ = true;
    // The thread keeps the hub alive: stop() may detach it (when called from a callback).
    thread_ = std::thread([self = shared_from_this()] { self->thread_main(); });
  }
  wake_.notify_one();
  return id;
}

void UvmWatcherHub::unwatch(uint64_t id) {
  if (on_hub_thread()) {
    // Inside a callback: no later poll may call it. The entry is erased (and its callback, which
    // may be the one running now, destroyed) between polls.
    for (Entry& e : entries_) {
      if (e.id == id && e.active) {
        e.active = false;
        watching_.fetch_sub(1, std::memory_order_relaxed);
      }
    }
  }
  std::unique_lock lock(mu_);
  if (!running_) return;  // stopped: the thread dropped every entry already
  Command c;
  c.entry.id = id;
  pending_.push_back(std::move(c));
  const uint64_t seq = ++queued_seq_;
  queued_hint_.store(seq, std::memory_order_release);
  wake_.notify_one();
  if (on_hub_thread()) return;
  applied_.wait(lock, [&] { return applied_seq_ >= seq || !running_; });
}

void UvmWatcherHub::stop() {
  std::thread thread;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    stop_flag_.store(true, std::memory_order_release);
    thread = std::move(thread_);
  }
  wake_.notify_all();
  if (!thread.joinable()) return;
  if (thread.get_id() == std::this_thread::get_id()) {
    thread.detach();  // a callback stopped its own engine: the thread ends after it returns
  } else {
    thread.join();
  }
}

size_t UvmWatcherHub::watching() const { return watching_.load(std::memory_order_acquire); }

void UvmWatcherHub::apply_commands() {
  std::vector<Command> commands;
  uint64_t seq;
  {
    std::lock_guard lock(mu_);
    commands.swap(pending_);
    seq = queued_seq_;
  }
  for (Command& c : commands) {
    if (c.add) {
      entries_.push_back(std::move(c.entry));
      watching_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    for (size_t i = 0; i < entries_.size(); ++i) {
      if (entries_[i].id != c.entry.id) continue;
      if (entries_[i].active) watching_.fetch_sub(1, std::memory_order_relaxed);
      entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(i));  // destroys the callback here
      break;
    }
  }
  {
    std::lock_guard lock(mu_);
    applied_seq_ = seq;
  }
  applied_.notify_all();
}

void UvmWatcherHub::thread_main() {
  thread_id_.store(std::this_thread::get_id(), std::memory_order_release);
  pthread_setname_np(pthread_self(), "fl-watcher");
  if (options_.cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(options_.cpu, &set);
    if (int ret = pthread_setaffinity_np(pthread_self(), sizeof(set), &set); ret != 0) {
      FL_LOG_WARN("cannot pin the UVM watcher thread to CPU {}: {}", options_.cpu, std::strerror(ret));
    }
  }
  uint64_t seen_seq = 0;
  auto last_change = std::chrono::steady_clock::now();
  while (true) {
    const uint64_t hint = queued_hint_.load(std::memory_order_acquire);
    if (hint != seen_seq) {
      apply_commands();
      seen_seq = hint;
    }
    if (stop_flag_.load(std::memory_order_acquire)) break;
    if (entries_.empty()) {
      // Nothing to poll: sleep until a watch(), unwatch() or stop().
      std::unique_lock lock(mu_);
      wake_.wait(lock, [&] { return stopping_ || queued_seq_ != seen_seq; });
      continue;
    }
    bool changed = false;
    for (size_t i = 0; i < entries_.size(); ++i) {
      Entry& e = entries_[i];
      if (!e.active) continue;
      const uint64_t v = __atomic_load_n(e.word, __ATOMIC_ACQUIRE);
      if (v == e.last) continue;
      const uint64_t old = e.last;
      e.last = v;
      changed = true;
      bool keep = true;
      try {
        keep = e.callback(old, v);
      } catch (const std::exception& ex) {
        FL_LOG_ERROR("UVM watcher callback threw ({}); it keeps watching", ex.what());
      } catch (...) {
        FL_LOG_ERROR("UVM watcher callback threw; it keeps watching");
      }
      // entries_ may not grow during callbacks (commands wait for the next pass), so `e` is valid.
      if (!keep && e.active) {
        e.active = false;
        watching_.fetch_sub(1, std::memory_order_relaxed);
      }
    }
    if (options_.spin) {
      cpu_relax();
      continue;
    }
    const auto now = std::chrono::steady_clock::now();
    if (changed) {
      last_change = now;
    } else if (now - last_change > kSpinWindow) {
      std::this_thread::sleep_for(kIdleSleep);
    } else {
      cpu_relax();
    }
  }
  std::vector<Entry> dropped;
  dropped.swap(entries_);
  watching_.store(0, std::memory_order_relaxed);
  std::vector<Command> unapplied;
  {
    std::lock_guard lock(mu_);
    unapplied.swap(pending_);
  }
  // Callbacks are destroyed on this thread, outside the lock, before unwatch() callers go on.
  dropped.clear();
  unapplied.clear();
  {
    std::lock_guard lock(mu_);
    running_ = false;
  }
  applied_.notify_all();
}

}  // namespace fabric_lib::detail

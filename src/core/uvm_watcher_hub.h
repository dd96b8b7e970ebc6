// The UVM watcher thread (DESIGN.md section 4): one per engine, started with the first watcher.
// It polls every watched 64-bit word and calls the word's callback when the value changed, right
// on its own thread (a hop to another thread would cost microseconds of the latency it exists to
// save). Plain C++: it polls host memory that GPUs happen to write; only allocating that memory
// needs CUDA (mapped_memory.h).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "fabric_lib/status.h"
#include "fabric_lib/uvm_watcher.h"

namespace fabric_lib::detail {

class UvmWatcherHub : public std::enable_shared_from_this<UvmWatcherHub> {
 public:
  struct Options {
    int cpu = -1;       // pin the thread here (-1: no pinning)
    bool spin = false;  // poll continuously; otherwise sleep between polls after kSpinWindow idle
  };
  // While watchers exist, the thread polls continuously for this long after the last change it
  // saw, then (unless Options::spin) sleeps kIdleSleep between polls: an idle engine must not burn
  // a core, and the first change after a quiet spell costs at most one sleep.
  static constexpr std::chrono::milliseconds kSpinWindow{20};
  static constexpr std::chrono::microseconds kIdleSleep{50};

  static std::shared_ptr<UvmWatcherHub> create(Options options);
  ~UvmWatcherHub();
  UvmWatcherHub(const UvmWatcherHub&) = delete;
  UvmWatcherHub& operator=(const UvmWatcherHub&) = delete;

  // Watches the 8-byte-aligned word at `word`, which must stay readable until unwatch() returns.
  // Changes after this call are reported (the current value is the callback's first old_value).
  // Stopped after stop().
  Result<uint64_t> watch(const uint64_t* word, WatchCallback callback);
  // Stops watching `id`. From another thread, it returns once the callback is not running and
  // never will again (and has been destroyed); on the watcher thread (inside a callback) it takes
  // effect at once for later polls. Unknown ids are ignored.
  void unwatch(uint64_t id);
  // Ends the thread (joins it; from the thread itself, detaches) and drops every watcher.
  void stop();
  bool on_hub_thread() const { return thread_id_.load(std::memory_order_acquire) == std::this_thread::get_id(); }
  // Watchers currently polled (after the thread applied the latest watch/unwatch).
  size_t watching() const;

 private:
  struct Entry {
    uint64_t id = 0;
    const uint64_t* word = nullptr;
    uint64_t last = 0;
    bool active = true;
    WatchCallback callback;
  };
  struct Command {
    bool add = false;
    Entry entry;  // add: the new entry; remove: entry.id
  };

  explicit UvmWatcherHub(Options options) : options_(options) {}
  void thread_main();
  // Hub thread: applies queued watch/unwatch commands.
  void apply_commands();

  const Options options_;
  mutable std::mutex mu_;
  std::condition_variable wake_;     // the thread: commands or stop while it has nothing to poll
  std::condition_variable applied_;  // unwatch() callers: commands applied
  std::vector<Command> pending_;
  uint64_t queued_seq_ = 0;   // commands queued so far
  uint64_t applied_seq_ = 0;  // commands the thread has applied
  std::atomic<uint64_t> queued_hint_{0};  // queued_seq_, read by the thread without the lock
  uint64_t next_id_ = 1;
  bool stopping_ = false;
  std::atomic<bool> stop_flag_{false};  // stopping_, read by the thread without the lock
  bool running_ = false;
  std::thread thread_;
  std::atomic<std::thread::id> thread_id_{};
  std::atomic<size_t> watching_{0};
  // Hub thread only.
  std::vector<Entry> entries_;
};

}  // namespace fabric_lib::detail

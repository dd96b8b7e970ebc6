// Lets a watchdog thread tell that the one thread driving a set of domains has been stuck inside
// a single provider call, and take that thread's work over safely.
//
// Why: a provider can block forever inside a call. libfabric 1.17's shm spins on a lock in the
// peer's shared memory, and a peer killed while holding it never releases it; the worker thread
// then never returns, and without a watchdog every request of its group would wait forever.
//
// Protocol: the driving thread brackets every provider call with enter()/leave(); the state word
// is odd while it is inside one. A watchdog that sees the same odd value for longer than its
// timeout calls try_abandon(value): a compare-exchange against leave()'s exchange, so exactly one
// side wins. If the watchdog wins, the driving thread is frozen at a provider-call boundary (its
// own data consistent, and it will never run its own code again: when the call returns,
// leave() parks it for good), and the watchdog may finish its requests.
#pragma once

#include <atomic>
#include <cstdint>

namespace fabric_lib::transport {

class ProviderCallGuard {
 public:
  // Driving thread only (whichever thread holds the group's progress ownership).
  void enter() {
    caller_.store(thread_token(), std::memory_order_relaxed);  // published by the release below
    state_.store(++calls_ * 2 + 1, std::memory_order_release);
  }
  void leave() {
    if (state_.exchange(calls_ * 2, std::memory_order_acq_rel) == kAbandoned) park_forever();
  }

  // Any thread: the current state (odd: inside a call; equal samples: the same call).
  uint64_t sample() const { return state_.load(std::memory_order_acquire); }
  // Watchdog: claims the driving thread if it is still inside the call `seen` was sampled in.
  bool try_abandon(uint64_t seen) {
    if ((seen & 1) == 0 || seen == kAbandoned) return false;
    if (!state_.compare_exchange_strong(seen, kAbandoned, std::memory_order_acq_rel)) return false;
    abandoned_.store(true, std::memory_order_seq_cst);
    return true;
  }
  bool abandoned() const { return abandoned_.load(std::memory_order_seq_cst); }
  // After try_abandon() succeeded: the thread_token() of the thread left inside the call (a
  // worker, or any other thread that held the group: a submitter, the callback thread reaping).
  uintptr_t stuck_thread() const { return caller_.load(std::memory_order_acquire); }
  // A value that names the calling thread while it lives.
  static uintptr_t thread_token() {
    static thread_local char token;
    return reinterpret_cast<uintptr_t>(&token);
  }

 private:
  static constexpr uint64_t kAbandoned = UINT64_MAX;
  // Never returns: the thread's owner has given up on it and its data belongs to others now.
  [[noreturn]] static void park_forever();

  std::atomic<uint64_t> state_{0};
  std::atomic<uintptr_t> caller_{0};
  std::atomic<bool> abandoned_{false};
  uint64_t calls_ = 0;  // driving thread only
};

// Brackets one provider call: `ProviderCall call(watch);`.
class ProviderCall {
 public:
  explicit ProviderCall(ProviderCallGuard& watch) : watch_(watch) { watch_.enter(); }
  ~ProviderCall() { watch_.leave(); }
  ProviderCall(const ProviderCall&) = delete;
  ProviderCall& operator=(const ProviderCall&) = delete;

 private:
  ProviderCallGuard& watch_;
};

}  // namespace fabric_lib::transport

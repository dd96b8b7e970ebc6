// Doorbell: a futex-backed sequence number. Whoever changes a control word on a CPU rank rings
// it; the proxy and the CPU halves sleep on it instead of spinning, so eight ranks share two
// cores. (GPU-written words cannot ring it: on GPU ranks the proxy polls.)
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <ctime>

namespace fabric_lib::moe::detail {

class Doorbell {
 public:
  uint32_t seq() const { return seq_.load(std::memory_order_acquire); }

  void ring() {
    seq_.fetch_add(1, std::memory_order_acq_rel);
    if (waiters_.load(std::memory_order_acquire) > 0) {
      syscall(SYS_futex, reinterpret_cast<uint32_t*>(&seq_), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
    }
  }

  // Returns when the sequence is no longer `seen`, or after `timeout`.
  void wait(uint32_t seen, std::chrono::nanoseconds timeout) {
    if (timeout.count() <= 0) return;
    timespec ts{static_cast<time_t>(timeout.count() / 1000000000), static_cast<long>(timeout.count() % 1000000000)};
    waiters_.fetch_add(1, std::memory_order_acq_rel);
    if (seq_.load(std::memory_order_acquire) == seen) {
      syscall(SYS_futex, reinterpret_cast<uint32_t*>(&seq_), FUTEX_WAIT_PRIVATE, seen, &ts, nullptr, 0);
    }
    waiters_.fetch_sub(1, std::memory_order_acq_rel);
  }

 private:
  std::atomic<uint32_t> seq_{0};
  std::atomic<uint32_t> waiters_{0};
};

}  // namespace fabric_lib::moe::detail

// A mutex for critical sections of a few dozen nanoseconds that one thread may hammer: lock()
// spins on try_lock() for a while before it blocks. std::mutex alone puts a contending thread to
// sleep in the kernel at once, and waking it costs microseconds — the engine's worker counting an
// imm while an application thread polls ImmCounter::count() in a loop paid that on most
// arrivals. After the spin it blocks as std::mutex does, so a holder that lost its core (few
// cores, many threads) is not spun on for long. Meets BasicLockable / Lockable (std::lock_guard,
// std::unique_lock).
#pragma once

#include <mutex>

#include "base/cpu_relax.h"

namespace fabric_lib {

class SpinningMutex {
 public:
  // 1-13 us of `pause` (10-140 cycles each, by x86 generation): far beyond the critical sections
  // it guards, far below a time slice.
  static constexpr int kSpins = 256;

  void lock() {
    for (int i = 0; i < kSpins; ++i) {
      if (mu_.try_lock()) return;
      cpu_relax();
    }
    mu_.lock();
  }
  bool try_lock() { return mu_.try_lock(); }
  void unlock() { mu_.unlock(); }

 private:
  std::mutex mu_;
};

}  // namespace fabric_lib

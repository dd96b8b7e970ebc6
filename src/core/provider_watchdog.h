// One thread per engine that notices a group worker stuck inside a single provider call for
// longer than the stall timeout, and takes its work over (GroupWorker::take_over_stuck): every
// request of that group fails with ProviderError instead of waiting forever, later ones fail at
// once, and stop() returns. The stuck thread is left behind (it cannot be interrupted).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "core/group_worker.h"

namespace fabric_lib::detail {

class ProviderWatchdog {
 public:
  // Watches `workers` (which outlive it) with the given timeout (> 0). `on_stuck_thread` hears of
  // the thread left inside each given-up call (its ProviderCallGuard::thread_token(); the engine
  // replaces its callback thread when it is that one).
  ProviderWatchdog(std::vector<GroupWorker*> workers, int64_t timeout_ns, StatCounters& stats,
                   std::function<void(uintptr_t)> on_stuck_thread = nullptr);
  ~ProviderWatchdog() { stop(); }
  ProviderWatchdog(const ProviderWatchdog&) = delete;
  ProviderWatchdog& operator=(const ProviderWatchdog&) = delete;

  void stop();

 private:
  struct Watched {
    GroupWorker* worker;
    uint64_t last_sample = 0;
    int64_t since_ns = 0;  // when last_sample was first seen
  };
  void run();
  void check(Watched& w, int64_t now);

  std::vector<Watched> watched_;
  const int64_t timeout_ns_;
  StatCounters& stats_;
  std::function<void(uintptr_t)> on_stuck_thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace fabric_lib::detail

// A thread that calls a function every `period` until stopped: the roles' timers (heartbeats,
// deadlines, confirmation timeouts, quarantine expiry). It waits on a condition variable, so
// stop() returns at once; a tick never runs after stop() returned.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace fabric_lib::kv {

class Ticker {
 public:
  Ticker(std::chrono::milliseconds period, std::function<void()> tick)
      : period_(period), tick_(std::move(tick)), thread_([this] { run(); }) {}
  ~Ticker() { stop(); }
  Ticker(const Ticker&) = delete;
  Ticker& operator=(const Ticker&) = delete;

  void stop() {
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
  }
  // Runs the next tick now (e.g. a state change that a tick finishes).
  void poke() {
    {
      std::lock_guard lock(mu_);
      poked_ = true;
    }
    cv_.notify_all();
  }

 private:
  void run() {
    std::unique_lock lock(mu_);
    while (!stopping_) {
      cv_.wait_for(lock, period_, [this] { return stopping_ || poked_; });
      if (stopping_) break;
      poked_ = false;
      lock.unlock();
      tick_();
      lock.lock();
    }
  }
  std::chrono::milliseconds period_;
  std::function<void()> tick_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool poked_ = false;
  std::thread thread_;
};

}  // namespace fabric_lib::kv

// The one exactly-once recorder of request outcomes for the multi-process tests: request i
// reports to sink(i), so a duplicate completion is seen even when another request's completion
// is missing (a shared counter would see the right total). After waiting for all of them, a test
// checks that nothing more arrives for a bounded quiet interval (bounds::kQuiet).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "fabric_lib/completion.h"
#include "support/bounds.h"

namespace fabric_lib::testing {

class Outcomes {
 public:
  explicit Outcomes(size_t n) : calls(n), codes_(n, ErrorCode::kInternal), times_(n) {}
  Outcomes(const Outcomes&) = delete;
  Outcomes& operator=(const Outcomes&) = delete;

  // Completions per request, and requests completed at least once.
  std::vector<std::atomic<int>> calls;
  std::atomic<size_t> finished{0};

  // The sink of request i. A second completion of i fails the test where it happens.
  Completion sink(size_t i) {
    return Completion::callback([this, i](const Status& s) { record(i, s); });
  }
  // What sink(i) does: callbacks of the test's own (agents, chained submits) call it.
  void record(size_t i, const Status& s) {
    if (i >= calls.size()) {
      ADD_FAILURE() << "completion for request " << i << " of " << calls.size();
      return;
    }
    std::lock_guard lock(mu_);  // a waiter woken by this completion sees its code and time too
    const int before = calls[i].fetch_add(1);
    if (before != 0) {
      ADD_FAILURE() << "request " << i << " completed again with " << s.to_string();
    } else {
      codes_[i] = s.code();
      times_[i] = std::chrono::steady_clock::now();
      if (!s.ok() && first_error_.empty()) first_error_ = "request " + std::to_string(i) + ": " + s.to_string();
      finished.fetch_add(1);
    }
    ++total_calls_;
    cv_.notify_all();
  }

  // Waits until the first `n` (default: all) requests completed; false on timeout.
  bool wait_all(std::chrono::milliseconds timeout) { return wait_until(calls.size(), timeout); }
  bool wait_until(size_t n, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return finished.load() >= n; });
  }
  // Waits until request i completed; false on timeout.
  bool wait_for_request(size_t i, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return calls[i].load() > 0; });
  }

  // After the waits: no completion arrives during `quiet`, and every request (of the first `used`,
  // for a test that submits fewer than it made room for) completed exactly once.
  void expect_exactly_once(std::chrono::milliseconds quiet = bounds::kQuiet, size_t used = SIZE_MAX) {
    size_t seen;
    {
      std::unique_lock lock(mu_);
      seen = total_calls_;
      cv_.wait_for(lock, quiet, [&] { return total_calls_ != seen; });
      EXPECT_EQ(total_calls_, seen) << "a completion arrived " << quiet.count() << " ms after the wait";
    }
    for (size_t i = 0; i < std::min(used, calls.size()); ++i) ASSERT_EQ(calls[i].load(), 1) << "request " << i;
    for (size_t i = std::min(used, calls.size()); i < calls.size(); ++i) ASSERT_EQ(calls[i].load(), 0) << "request " << i;
  }

  // Waits for every request, checks exactly-once (with the quiet interval) and that all are Ok.
  ::testing::AssertionResult all_ok(std::chrono::milliseconds timeout = bounds::kRequests) {
    if (!wait_all(timeout)) {
      return ::testing::AssertionFailure() << "only " << finished.load() << " of " << calls.size()
                                           << " requests completed within " << timeout.count() << " ms";
    }
    expect_exactly_once();
    std::lock_guard lock(mu_);
    if (!first_error_.empty()) return ::testing::AssertionFailure() << first_error_;
    return ::testing::AssertionSuccess();
  }

  ErrorCode code(size_t i) {
    std::lock_guard lock(mu_);
    return codes_[i];
  }
  // When request i first completed (steady clock; epoch when it has not).
  std::chrono::steady_clock::time_point completed_at(size_t i) {
    std::lock_guard lock(mu_);
    return times_[i];
  }
  size_t count(ErrorCode c) {
    std::lock_guard lock(mu_);
    size_t n = 0;
    for (size_t i = 0; i < codes_.size(); ++i) n += calls[i].load() > 0 && codes_[i] == c;
    return n;
  }
  std::map<ErrorCode, size_t> codes() {
    std::lock_guard lock(mu_);
    std::map<ErrorCode, size_t> out;
    for (size_t i = 0; i < codes_.size(); ++i) {
      if (calls[i].load() > 0) out[codes_[i]]++;
    }
    return out;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<ErrorCode> codes_;
  std::vector<std::chrono::steady_clock::time_point> times_;
  size_t total_calls_ = 0;
  std::string first_error_;
};

}  // namespace fabric_lib::testing

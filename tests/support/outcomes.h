// Records each request's outcome and how often its completion ran (exactly-once checks).
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "fabric_lib/completion.h"

namespace fabric_lib::testing {

struct Outcomes {
  explicit Outcomes(size_t n) : calls(n) {}
  std::vector<std::atomic<int>> calls;
  std::mutex mu;
  std::map<ErrorCode, size_t> codes;
  std::atomic<size_t> finished{0};

  Completion sink(size_t i) {
    return Completion::callback([this, i](const Status& s) {
      if (calls[i].fetch_add(1) != 0) ADD_FAILURE() << "request " << i << " completed again with " << s.to_string();
      {
        std::lock_guard lock(mu);
        codes[s.code()]++;
      }
      finished.fetch_add(1);
    });
  }
  bool wait_all(std::chrono::milliseconds timeout) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (finished.load() < calls.size() && std::chrono::steady_clock::now() < end) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return finished.load() == calls.size();
  }
  void expect_exactly_once() {
    for (size_t i = 0; i < calls.size(); ++i) ASSERT_EQ(calls[i].load(), 1) << "request " << i;
  }
  size_t count(ErrorCode c) {
    std::lock_guard lock(mu);
    return codes.count(c) ? codes[c] : 0;
  }
};

}  // namespace fabric_lib::testing

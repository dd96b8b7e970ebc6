// Waits (bounded) until a condition on state the engine exposes holds: polls it every 200 µs.
#pragma once

#include <chrono>
#include <thread>

namespace fabric_lib::testing {

// True once `pred()` holds; false if it still does not after `limit`.
template <typename Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= end) return pred();
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

}  // namespace fabric_lib::testing

// Shared by the ipc unit tests: opening domains with small rings, and polling them until a
// condition holds.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "transport/ipc/ipc_domain.h"

namespace fabric_lib::transport::ipc::testing {

inline std::unique_ptr<IpcDomain> open_domain(uint64_t slots = 8192, GpuBackendFactory gpu = {},
                                                 size_t max_inflight = 4096) {
  IpcOptions o;
  o.geometry.slots = slots;
  o.geometry.table_entries = 64;
  o.max_inflight = max_inflight;
  o.gpu = std::move(gpu);
  Result<std::unique_ptr<IpcDomain>> d = IpcDomain::open(std::move(o));
  EXPECT_TRUE(d.ok()) << d.status().to_string();
  return d.ok() ? std::move(d).value() : nullptr;
}

// Polls every domain (appending each one's events to its own list) until `done()` or timeout.
inline bool poll_until(const std::vector<IpcDomain*>& domains, std::vector<std::vector<Event>*> events,
                       const std::function<bool()>& done, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    bool any = false;
    for (size_t i = 0; i < domains.size(); ++i) any |= domains[i]->poll(*events[i], 64) > 0;
    if (!any) std::this_thread::yield();
  }
  return true;
}

inline size_t count_kind(const std::vector<Event>& events, EventKind kind) {
  size_t n = 0;
  for (const Event& e : events) n += e.kind == kind;
  return n;
}

}  // namespace fabric_lib::transport::ipc::testing

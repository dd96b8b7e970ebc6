// Shared by the ipc unit tests: opening domains with small rings, polling them until a condition
// holds, counting what the events report, a pair of domains in this process, and WRs.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "transport/ipc/ipc_domain.h"

namespace fabric_lib::transport::ipc::testing {

// The options open_domain uses: small rings and tables.
inline IpcOptions test_options(uint64_t slots = 8192, GpuBackendFactory gpu = {}, size_t max_inflight = 4096) {
  IpcOptions o;
  o.geometry.slots = slots;
  o.geometry.table_entries = 64;
  o.max_inflight = max_inflight;
  o.gpu = std::move(gpu);
  return o;
}

inline std::unique_ptr<IpcDomain> open_domain(IpcOptions o) {
  Result<std::unique_ptr<IpcDomain>> d = IpcDomain::open(std::move(o));
  EXPECT_TRUE(d.ok()) << d.status().to_string();
  return d.ok() ? std::move(d).value() : nullptr;
}

inline std::unique_ptr<IpcDomain> open_domain(uint64_t slots = 8192, GpuBackendFactory gpu = {},
                                                 size_t max_inflight = 4096) {
  return open_domain(test_options(slots, std::move(gpu), max_inflight));
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

// How many events of `kind` there are.
inline size_t count_kind(const std::vector<Event>& events, EventKind kind) {
  size_t n = 0;
  for (const Event& e : events) n += e.kind == kind;
  return n;
}

// How many WRs (kWriteDone) or imm arrivals (kImm) the events of `kind` report: the sum of their
// Event::count (a run's WRs complete in one event, its imms arrive in one).
inline uint64_t count_of(const std::vector<Event>& events, EventKind kind) {
  uint64_t n = 0;
  for (const Event& e : events) n += e.kind == kind ? e.count : 0;
  return n;
}

// Two domains in this process: a writes into b.
struct Pair {
  std::unique_ptr<IpcDomain> a, b;
  PeerHandle b_at_a = 0;
  std::vector<Event> ea, eb;
  explicit Pair(uint64_t b_slots = 8192, size_t max_inflight = 4096)
      : Pair(test_options(8192, {}, max_inflight), test_options(b_slots)) {}
  Pair(IpcOptions a_options, IpcOptions b_options) {
    a = open_domain(std::move(a_options));
    b = open_domain(std::move(b_options));
    if (!a || !b) return;
    Result<PeerHandle> h = a->add_peer(b->address());
    EXPECT_TRUE(h.ok()) << h.status().to_string();
    if (h.ok()) b_at_a = *h;
  }
  bool poll_until(const std::function<bool()>& done) { return testing::poll_until({a.get(), b.get()}, {&ea, &eb}, done); }
};

inline WriteWr write_wr(const void* src, void* src_desc, uint64_t length, PeerHandle peer, uint64_t offset, uint64_t rkey,
                        std::optional<uint32_t> imm, uint64_t context) {
  WriteWr wr;
  wr.src = src;
  wr.src_desc = src_desc;
  wr.length = length;
  wr.peer = peer;
  wr.remote_addr = offset;
  wr.rkey = rkey;
  wr.has_imm = imm.has_value();
  wr.imm = imm.value_or(0);
  wr.context = context;
  return wr;
}

}  // namespace fabric_lib::transport::ipc::testing

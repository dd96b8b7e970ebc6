// The engine's registered regions, looked up by MrHandle on every submit.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <shared_mutex>
#include <unordered_map>
#include <vector>

#include "fabric_lib/memory.h"
#include "transport/domain.h"

namespace fabric_lib::detail {

// One registered region on every domain of its group. Requests hold a shared_ptr to it, so the
// provider registrations stay open until the last request using them has completed.
struct MrEntry {
  uint64_t id = 0;
  size_t group = 0;
  uint8_t* ptr = nullptr;
  uint64_t length = 0;
  Access access = Access::kLocalOnly;
  MemoryKind kind = MemoryKind::kHost;
  std::vector<transport::DomainMr> domain_mrs;  // one per domain of the group
  MrDesc desc;
  // Set by unregister_memory: holders (prepared requests) refuse new submits from then on.
  std::atomic<bool> unregistered{false};
};

class MrRegistry {
 public:
  uint64_t next_id() { return next_id_.fetch_add(1, std::memory_order_relaxed); }
  void insert(std::shared_ptr<MrEntry> entry);
  std::shared_ptr<MrEntry> find(MrHandle handle) const;
  // Removes and returns the entry (null when unknown).
  std::shared_ptr<MrEntry> remove(MrHandle handle);
  // Removes everything (at shutdown).
  void clear();

 private:
  mutable std::shared_mutex mu_;
  std::unordered_map<uint64_t, std::shared_ptr<MrEntry>> entries_;
  std::atomic<uint64_t> next_id_{1};
};

}  // namespace fabric_lib::detail

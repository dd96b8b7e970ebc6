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
  // Set by MrRegistry::remove (unregister_memory): holders (prepared requests) refuse new submits
  // from then on, and the per-thread lookup caches stop returning it.
  std::atomic<bool> unregistered{false};
};

// Lookups take no lock in steady state: each thread keeps weak references to the regions it
// looked up last (a small direct-mapped cache keyed by registry and id; ids are never reused), and
// a cached entry counts only while it is not marked unregistered — remove() marks it before it
// lets go, so a lookup that follows a completed remove() (in the caller's happens-before order)
// never returns the region, even while requests still hold it. Misses take the shared lock.
class MrRegistry {
 public:
  MrRegistry();
  uint64_t next_id() { return next_id_.fetch_add(1, std::memory_order_relaxed); }
  void insert(std::shared_ptr<MrEntry> entry);
  std::shared_ptr<MrEntry> find(MrHandle handle) const;
  // Marks the entry unregistered, removes it and returns it (null when unknown).
  std::shared_ptr<MrEntry> remove(MrHandle handle);
  // Marks and removes everything (at shutdown).
  void clear();

 private:
  const uint64_t instance_;  // tells registries apart in the per-thread caches (addresses are reused)
  mutable std::shared_mutex mu_;
  std::unordered_map<uint64_t, std::shared_ptr<MrEntry>> entries_;
  std::atomic<uint64_t> next_id_{1};
};

}  // namespace fabric_lib::detail

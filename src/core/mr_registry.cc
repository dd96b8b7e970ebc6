#include "core/mr_registry.h"

#include <array>
#include <mutex>

namespace fabric_lib::detail {
namespace {

std::atomic<uint64_t> next_instance{1};

// A thread's recent lookups. Weak references: a cached region closes when its last holder lets
// go, as if it were not cached.
struct CachedMr {
  uint64_t instance = 0;
  uint64_t id = 0;
  std::weak_ptr<MrEntry> entry;
};
constexpr size_t kCachedMrs = 16;
thread_local std::array<CachedMr, kCachedMrs> cached_mrs;

}  // namespace

MrRegistry::MrRegistry() : instance_(next_instance.fetch_add(1, std::memory_order_relaxed)) {}

void MrRegistry::insert(std::shared_ptr<MrEntry> entry) {
  std::unique_lock lock(mu_);
  entries_.emplace(entry->id, std::move(entry));
}

std::shared_ptr<MrEntry> MrRegistry::find(MrHandle handle) const {
  CachedMr& cached = cached_mrs[handle.id % kCachedMrs];
  if (cached.instance == instance_ && cached.id == handle.id) {
    std::shared_ptr<MrEntry> entry = cached.entry.lock();
    if (entry && !entry->unregistered.load(std::memory_order_acquire)) return entry;
  }
  std::shared_ptr<MrEntry> entry;
  {
    std::shared_lock lock(mu_);
    auto it = entries_.find(handle.id);
    if (it != entries_.end()) entry = it->second;
  }
  if (entry) {
    cached.instance = instance_;
    cached.id = handle.id;
    cached.entry = entry;
  }
  return entry;
}

std::shared_ptr<MrEntry> MrRegistry::remove(MrHandle handle) {
  std::unique_lock lock(mu_);
  auto it = entries_.find(handle.id);
  if (it == entries_.end()) return nullptr;
  std::shared_ptr<MrEntry> entry = std::move(it->second);
  // Before remove() returns: the threads' cached references stop counting from here on.
  entry->unregistered.store(true, std::memory_order_release);
  entries_.erase(it);
  return entry;
}

void MrRegistry::clear() {
  std::unique_lock lock(mu_);
  for (auto& [id, entry] : entries_) entry->unregistered.store(true, std::memory_order_release);
  entries_.clear();
}

}  // namespace fabric_lib::detail

#include "core/mr_registry.h"

#include <mutex>

namespace fabric_lib::detail {

void MrRegistry::insert(std::shared_ptr<MrEntry> entry) {
  std::unique_lock lock(mu_);
  entries_.emplace(entry->id, std::move(entry));
}

std::shared_ptr<MrEntry> MrRegistry::find(MrHandle handle) const {
  std::shared_lock lock(mu_);
  auto it = entries_.find(handle.id);
  return it == entries_.end() ? nullptr : it->second;
}

std::shared_ptr<MrEntry> MrRegistry::remove(MrHandle handle) {
  std::unique_lock lock(mu_);
  auto it = entries_.find(handle.id);
  if (it == entries_.end()) return nullptr;
  std::shared_ptr<MrEntry> entry = std::move(it->second);
  entries_.erase(it);
  return entry;
}

void MrRegistry::clear() {
  std::unique_lock lock(mu_);
  entries_.clear();
}

}  // namespace fabric_lib::detail

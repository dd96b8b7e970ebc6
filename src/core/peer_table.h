// Lazily inserted peers of one domain: address bytes -> provider handle. Worker thread only.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <unordered_map>

#include "transport/domain.h"

namespace fabric_lib::detail {

class PeerTable {
 public:
  Result<transport::PeerHandle> resolve(transport::Domain& domain, std::span<const uint8_t> address) {
    const std::string_view key(reinterpret_cast<const char*>(address.data()), address.size());
    auto it = map_.find(key);
    if (it != map_.end()) return it->second;
    Result<transport::PeerHandle> handle = domain.add_peer(address);
    if (handle.ok()) map_.emplace(std::string(key), *handle);
    return handle;
  }
  // Removes the peer; true when it was known.
  bool forget(transport::Domain& domain, std::span<const uint8_t> address) {
    const std::string_view key(reinterpret_cast<const char*>(address.data()), address.size());
    auto it = map_.find(key);
    if (it == map_.end()) return false;
    domain.remove_peer(it->second);
    map_.erase(it);
    return true;
  }
  size_t size() const { return map_.size(); }

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, transport::PeerHandle, Hash, std::equal_to<>> map_;
};

}  // namespace fabric_lib::detail

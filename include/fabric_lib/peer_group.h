// PeerGroup: a fixed set of destination regions resolved once, for repeated scatters.
#pragma once

#include <cstddef>
#include <memory>

#include "fabric_lib/memory.h"

namespace fabric_lib {

class TransferEngine;

// A fixed set of destination regions resolved once (address-vector entries inserted ahead of
// time) by TransferEngine::add_peer_group, for repeated scatters to the same peers (e.g. MoE
// dispatch): ScatterRequest::group names it and targets index its descriptors. Cheap to copy;
// valid for the engine that made it (another engine's group is refused by submit_scatter).
class PeerGroup {
 public:
  PeerGroup() = default;
  size_t size() const;
  // Descriptor `i` (an empty one when i >= size()).
  const MrDesc& desc(size_t i) const;
  bool empty() const { return data_ == nullptr; }

  struct Data;  // defined by the engine

 private:
  friend class TransferEngine;
  explicit PeerGroup(std::shared_ptr<const Data> data) : data_(std::move(data)) {}
  std::shared_ptr<const Data> data_;
};

}  // namespace fabric_lib

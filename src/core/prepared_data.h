// What prepared requests (fabric_lib/prepared.h) hold: everything validated and resolved at
// prepare time, so a submit checks only the bounds of what changes.
#pragma once

#include <memory>
#include <vector>

#include "core/mr_registry.h"
#include "core/peer_group_data.h"
#include "fabric_lib/prepared.h"

namespace fabric_lib {

struct PreparedPagedWrites::Data {
  const void* engine = nullptr;  // the EngineCore that made it
  std::shared_ptr<detail::MrEntry> src;
  std::shared_ptr<const PeerGroup::Data> dst;  // one descriptor, its peer resolved
  PagedWriteTemplate t;
};

struct PreparedScatter::Data {
  const void* engine = nullptr;
  std::shared_ptr<detail::MrEntry> src;
  std::shared_ptr<const PeerGroup::Data> peers;
  std::vector<PreparedScatterTarget> targets;
  ScatterSharding sharding = ScatterSharding::kByPeer;
  Route route;
};

}  // namespace fabric_lib

// What a PeerGroup (fabric_lib/peer_group.h) holds: its descriptors, their lengths and, per
// descriptor, the peer entry its group's worker resolved (every path inserted ahead of time).
#pragma once

#include <cstdint>
#include <vector>

#include "fabric_lib/memory.h"
#include "fabric_lib/peer_group.h"

namespace fabric_lib {

namespace detail {
struct PeerEntry;
}

struct PeerGroup::Data {
  const void* engine = nullptr;  // the EngineCore whose worker resolved `peers`
  size_t group = 0;
  // Checked as destinations when the group was made (EngineCore::check_remote with an empty
  // range): a submit naming a member checks only its range, against `lengths`.
  std::vector<MrDesc> descs;
  std::vector<uint64_t> lengths;          // descs[i].length()
  std::vector<detail::PeerEntry*> peers;  // owned by the group's worker
};

}  // namespace fabric_lib

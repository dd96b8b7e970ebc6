// What a PeerGroup holds: its descriptors and, per domain, their resolved peer handles.
#pragma once

#include <vector>

#include "fabric_lib/memory.h"
#include "transport/domain.h"

namespace fabric_lib::detail {

struct PeerEntry;

struct PeerGroupData {
  size_t group = 0;
  std::vector<MrDesc> descs;
  std::vector<PeerEntry*> peers;  // resolved by the owning group's worker
};

}  // namespace fabric_lib::detail

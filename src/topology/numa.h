// NUMA nodes and their physical cores, from devices/system/{node,cpu}.
#pragma once

#include <vector>

#include "fabric_lib/topology.h"
#include "topology/sysfs.h"

namespace fabric_lib::topology {

// Every node under devices/system/node; without any, one node 0 holding the online CPUs.
std::vector<NumaNode> scan_numa(const Sysfs& sysfs);

}  // namespace fabric_lib::topology

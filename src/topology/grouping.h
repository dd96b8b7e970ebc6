// Grouping GPUs with NICs, and handing out NUMA-local CPUs to the groups.
#pragma once

#include <vector>

#include "fabric_lib/topology.h"

namespace fabric_lib::topology {

// One group per GPU with the NICs under its PCIe switch: the NICs below the deepest PCI bridge a
// NIC shares with any GPU go to the GPUs below that bridge, split evenly in PCI order (shared when
// there are fewer NICs than GPUs). A GPU without such a NIC gets NICs of its NUMA node that no
// switch claimed (split evenly among those GPUs), else any NIC of its node, else any NIC.
// Without GPUs: one host group with every NIC. CPUs: see assign_cpus.
std::vector<DeviceGroup> group_devices(const std::vector<GpuDevice>& gpus, const std::vector<NicDevice>& nics,
                                       const std::vector<NumaNode>& numa_nodes);

// Splits each NUMA node's physical cores evenly among the groups on that node (leaving core 0 to
// the operating system when there are more than two cores per group); the worker gets the first
// core of a group's share, the watcher the second (or the first again).
void assign_cpus(const std::vector<NumaNode>& numa_nodes, std::vector<DeviceGroup>& groups);

}  // namespace fabric_lib::topology

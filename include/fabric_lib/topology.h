// Machine topology: GPUs, RDMA NICs, NUMA nodes and CPUs, read from sysfs (no CUDA needed), and
// their grouping into DomainGroups: each GPU with the NICs under the same PCIe switch, plus
// NUMA-local CPUs for the group's worker and watcher threads.
//
// Build an engine over every GPU with N NICs each (the paper's TransferEngine(nets_per_gpu,
// cuda_devices)):
//
//   Result<Topology> topo = detect_topology();
//   auto engine = TransferEngineBuilder().provider("efa").from_topology(*topo, 4).build();
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fabric_lib/status.h"

namespace fabric_lib {

// An NVIDIA GPU found on the PCI bus (class 0x0302 "3D controller" or 0x0300 "VGA", vendor 0x10de).
struct GpuDevice {
  size_t index = 0;                   // position in PCI address order (CUDA's PCI_BUS_ID order)
  std::string pci_address;            // "0000:53:00.0"
  uint16_t device_id = 0;
  int numa_node = -1;                 // -1 when the platform does not say
  std::vector<std::string> pci_path;  // host bridge, bridges from the root port down, the device
};

// An RDMA NIC: an entry of /sys/class/infiniband and/or a domain that a libfabric RDMA provider
// (efa, verbs) reports.
struct NicDevice {
  std::string name;                   // RDMA device name ("rdmap16s27", "mlx5_0")
  std::string domain_name;            // libfabric domain name when a provider reported it ("rdmap16s27-rdm")
  std::string provider;               // that provider ("efa", "verbs"); empty when seen in sysfs only
  std::string pci_address;            // empty when unknown
  int numa_node = -1;
  std::vector<std::string> pci_path;  // as for GpuDevice; empty when unknown

  // The name to give TransferEngineBuilder::interfaces(): the libfabric domain name when known.
  const std::string& interface_name() const { return domain_name.empty() ? name : domain_name; }
};

// A NUMA node and its CPUs.
struct NumaNode {
  int id = 0;
  std::vector<int> cpus;            // every logical CPU
  std::vector<int> physical_cores;  // one logical CPU per physical core (the lowest sibling)
};

// What one DomainGroup of an engine should use.
struct DeviceGroup {
  std::optional<size_t> gpu;  // index into Topology::gpus; empty for a host group
  std::vector<size_t> nics;   // indices into Topology::nics (may be shared with another group when
                              // a PCIe switch has fewer NICs than GPUs)
  int numa_node = 0;
  std::vector<int> cpus;      // NUMA-local physical cores set aside for this group
  int worker_cpu = -1;        // where the group's worker thread goes (-1: no CPU information)
  int watcher_cpu = -1;       // where its UVM watcher thread goes
};

struct Topology {
  std::vector<GpuDevice> gpus;
  std::vector<NicDevice> nics;
  std::vector<NumaNode> numa_nodes;
  // One group per GPU; when there is no GPU, one host group (holding every RDMA NIC, if any).
  std::vector<DeviceGroup> groups;

  // The interface names of group `g`'s NICs, in order (empty when it has none or g is out of range).
  std::vector<std::string> group_interfaces(size_t g) const;
  // A multi-line human-readable description (used by fabric-info).
  std::string describe() const;
};

struct TopologyOptions {
  // Where sysfs is mounted; tests point it at a fake tree in a temporary directory.
  std::string sysfs_root = "/sys";
  // libfabric providers asked (fi_getinfo) for their NICs' domain names and PCI addresses. Only
  // RDMA providers make sense here; empty = do not ask libfabric.
  std::vector<std::string> providers = {"efa", "verbs"};
};

// Reads the topology. Missing sysfs parts are not errors (a machine without NUMA information gets
// one node with every online CPU; without GPUs and RDMA NICs, one host group); only a sysfs root
// that does not exist is.
Result<Topology> detect_topology(const TopologyOptions& options = {});

}  // namespace fabric_lib

#include "fabric_lib/topology.h"

#include <cstdio>
#include <sstream>

#include "topology/devices.h"
#include "topology/grouping.h"
#include "topology/numa.h"
#include "topology/sysfs.h"

namespace fabric_lib {
namespace {

// "0-3,8" from a sorted list.
std::string cpu_ranges(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus[i]);
    if (j > i) out += '-' + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out.empty() ? "none" : out;
}

}  // namespace

std::vector<std::string> Topology::group_interfaces(size_t g) const {
  std::vector<std::string> names;
  if (g >= groups.size()) return names;
  for (size_t n : groups[g].nics) {
    if (n < nics.size()) names.push_back(nics[n].interface_name());
  }
  return names;
}

std::string Topology::describe() const {
  std::ostringstream out;
  out << "GPUs: " << gpus.size() << "\n";
  for (const GpuDevice& g : gpus) {
    char id[8];
    std::snprintf(id, sizeof(id), "%04x", g.device_id);
    out << "  gpu" << g.index << "  " << g.pci_address << "  device 10de:" << id << "  numa " << g.numa_node << "\n";
  }
  out << "RDMA NICs: " << nics.size() << "\n";
  for (const NicDevice& n : nics) {
    out << "  " << n.name << "  " << (n.pci_address.empty() ? "(no PCI address)" : n.pci_address) << "  numa "
        << n.numa_node;
    if (!n.provider.empty()) out << "  libfabric " << n.provider << " domain " << n.domain_name;
    out << "\n";
  }
  out << "NUMA nodes: " << numa_nodes.size() << "\n";
  for (const NumaNode& node : numa_nodes) {
    out << "  node" << node.id << "  CPUs " << cpu_ranges(node.cpus) << "  (" << node.physical_cores.size()
        << " physical cores: " << cpu_ranges(node.physical_cores) << ")\n";
  }
  out << "Groups: " << groups.size() << "\n";
  for (size_t i = 0; i < groups.size(); ++i) {
    const DeviceGroup& g = groups[i];
    out << "  group" << i << "  " << (g.gpu ? "gpu" + std::to_string(*g.gpu) : std::string("host")) << "  NICs [";
    const std::vector<std::string> names = group_interfaces(i);
    for (size_t k = 0; k < names.size(); ++k) out << (k ? ", " : "") << names[k];
    out << "]  numa " << g.numa_node << "  CPUs " << cpu_ranges(g.cpus) << "  worker " << g.worker_cpu
        << "  watcher " << g.watcher_cpu << "\n";
  }
  return out.str();
}

Result<Topology> detect_topology(const TopologyOptions& options) {
  topology::Sysfs sysfs(options.sysfs_root);
  if (!sysfs.exists("")) return not_found("sysfs root " + options.sysfs_root + " does not exist");
  Topology t;
  t.gpus = topology::scan_gpus(sysfs);
  t.nics = topology::scan_infiniband(sysfs);
  if (!options.providers.empty()) {
    topology::merge_fabric_nics(sysfs, topology::query_libfabric_nics(options.providers), t.nics);
  }
  t.numa_nodes = topology::scan_numa(sysfs);
  t.groups = topology::group_devices(t.gpus, t.nics, t.numa_nodes);
  return t;
}

}  // namespace fabric_lib

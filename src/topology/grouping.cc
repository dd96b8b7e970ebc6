#include "topology/grouping.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

namespace fabric_lib::topology {
namespace {

// Shared PCI path components of two devices (the devices themselves excluded). The host bridge
// counts as one, so 1 means "same root complex only" and >= 2 "below a common bridge or switch".
size_t common_depth(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  if (a.empty() || b.empty()) return 0;
  const size_t limit = std::min(a.size(), b.size()) - 1;  // the devices themselves never count
  size_t n = 0;
  while (n < limit && a[n] == b[n]) ++n;
  return n;
}

constexpr size_t kSameSwitchDepth = 2;

// m NICs over k GPUs: contiguous, even shares; when m < k, GPUs share NICs.
std::vector<std::vector<size_t>> split_evenly(const std::vector<size_t>& nics, size_t k) {
  std::vector<std::vector<size_t>> out(k);
  const size_t m = nics.size();
  if (m == 0) return out;
  for (size_t j = 0; j < k; ++j) {
    if (m >= k) {
      for (size_t i = j * m / k; i < (j + 1) * m / k; ++i) out[j].push_back(nics[i]);
    } else {
      out[j].push_back(nics[j * m / k]);
    }
  }
  return out;
}

int node_or_first(int node, const std::vector<NumaNode>& numa_nodes) {
  for (const NumaNode& n : numa_nodes) {
    if (n.id == node) return node;
  }
  return numa_nodes.empty() ? 0 : numa_nodes.front().id;
}

}  // namespace

std::vector<DeviceGroup> group_devices(const std::vector<GpuDevice>& gpus, const std::vector<NicDevice>& nics,
                                       const std::vector<NumaNode>& numa_nodes) {
  // NICs in PCI order (then by name), so shares are contiguous and stable.
  std::vector<size_t> nic_order(nics.size());
  for (size_t i = 0; i < nics.size(); ++i) nic_order[i] = i;
  std::sort(nic_order.begin(), nic_order.end(), [&](size_t a, size_t b) {
    return std::tie(nics[a].pci_address, nics[a].name) < std::tie(nics[b].pci_address, nics[b].name);
  });

  std::vector<DeviceGroup> groups;
  if (gpus.empty()) {
    DeviceGroup host;
    host.nics = nic_order;
    host.numa_node = node_or_first(nics.empty() ? -1 : nics[nic_order[0]].numa_node, numa_nodes);
    groups.push_back(std::move(host));
    assign_cpus(numa_nodes, groups);
    return groups;
  }

  groups.resize(gpus.size());
  for (size_t g = 0; g < gpus.size(); ++g) {
    groups[g].gpu = g;
    groups[g].numa_node = node_or_first(gpus[g].numa_node, numa_nodes);
  }

  // Step 1: each NIC goes with the GPUs it shares the deepest bridge with, if that is a switch.
  std::map<std::vector<size_t>, std::vector<size_t>> clusters;  // GPUs below a bridge -> its NICs
  std::set<size_t> claimed;
  for (size_t n : nic_order) {
    size_t best = 0;
    std::vector<size_t> near;
    for (size_t g = 0; g < gpus.size(); ++g) {
      const size_t depth = common_depth(gpus[g].pci_path, nics[n].pci_path);
      if (depth > best) {
        best = depth;
        near.assign(1, g);
      } else if (depth == best && depth > 0) {
        near.push_back(g);
      }
    }
    if (best < kSameSwitchDepth) continue;
    clusters[near].push_back(n);
    claimed.insert(n);
  }
  for (const auto& [cluster_gpus, cluster_nics] : clusters) {
    const std::vector<std::vector<size_t>> shares = split_evenly(cluster_nics, cluster_gpus.size());
    for (size_t j = 0; j < cluster_gpus.size(); ++j) {
      std::vector<size_t>& mine = groups[cluster_gpus[j]].nics;
      mine.insert(mine.end(), shares[j].begin(), shares[j].end());
    }
  }

  // Step 2: GPUs left without a NIC take NICs of their NUMA node.
  std::map<int, std::vector<size_t>> orphans;  // NUMA node -> GPUs
  for (size_t g = 0; g < gpus.size(); ++g) {
    if (groups[g].nics.empty()) orphans[groups[g].numa_node].push_back(g);
  }
  for (const auto& [node, orphan_gpus] : orphans) {
    std::vector<size_t> unclaimed_local, local, unclaimed;
    for (size_t n : nic_order) {
      const bool on_node = node_or_first(nics[n].numa_node, numa_nodes) == node;
      if (on_node && !claimed.count(n)) unclaimed_local.push_back(n);
      if (on_node) local.push_back(n);
      if (!claimed.count(n)) unclaimed.push_back(n);
    }
    const std::vector<size_t>& pool = !unclaimed_local.empty() ? unclaimed_local
                                      : !local.empty()         ? local
                                      : !unclaimed.empty()     ? unclaimed
                                                               : nic_order;
    const std::vector<std::vector<size_t>> shares = split_evenly(pool, orphan_gpus.size());
    for (size_t j = 0; j < orphan_gpus.size(); ++j) groups[orphan_gpus[j]].nics = shares[j];
  }
  assign_cpus(numa_nodes, groups);
  return groups;
}

void assign_cpus(const std::vector<NumaNode>& numa_nodes, std::vector<DeviceGroup>& groups) {
  for (const NumaNode& node : numa_nodes) {
    std::vector<DeviceGroup*> here;
    for (DeviceGroup& g : groups) {
      if (g.numa_node == node.id) here.push_back(&g);
    }
    std::vector<int> cores = node.physical_cores.empty() ? node.cpus : node.physical_cores;
    if (here.empty() || cores.empty()) continue;
    if (cores.size() > 2 * here.size() && cores.front() == 0) cores.erase(cores.begin());
    const size_t per = std::max<size_t>(1, cores.size() / here.size());
    for (size_t i = 0; i < here.size(); ++i) {
      DeviceGroup& g = *here[i];
      g.cpus.clear();
      if (i * per < cores.size()) {
        for (size_t c = i * per; c < std::min(cores.size(), (i + 1) * per); ++c) g.cpus.push_back(cores[c]);
      } else {
        g.cpus.push_back(cores[i % cores.size()]);  // more groups than cores: share
      }
      g.worker_cpu = g.cpus.front();
      g.watcher_cpu = g.cpus.size() > 1 ? g.cpus[1] : g.cpus.front();
    }
  }
}

}  // namespace fabric_lib::topology

#include "topology/numa.h"

#include <algorithm>
#include <cctype>

namespace fabric_lib::topology {
namespace {

// Drops hyperthread siblings: a CPU is a core's representative when it is the lowest CPU of its
// thread_siblings_list (or when the list is unavailable).
std::vector<int> physical_cores_of(const Sysfs& sysfs, const std::vector<int>& cpus) {
  std::vector<int> cores;
  for (int cpu : cpus) {
    const std::string dir = "devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    std::optional<std::string> siblings = sysfs.read_line(dir + "thread_siblings_list");
    if (!siblings) siblings = sysfs.read_line(dir + "core_cpus_list");
    const std::vector<int> list = siblings ? parse_cpu_list(*siblings) : std::vector<int>();
    if (list.empty() || list.front() == cpu) cores.push_back(cpu);
  }
  return cores;
}

}  // namespace

std::vector<NumaNode> scan_numa(const Sysfs& sysfs) {
  std::vector<NumaNode> nodes;
  for (const std::string& entry : sysfs.list("devices/system/node")) {
    if (entry.size() <= 4 || entry.rfind("node", 0) != 0) continue;
    if (!std::all_of(entry.begin() + 4, entry.end(), [](unsigned char c) { return std::isdigit(c); })) continue;
    NumaNode node;
    node.id = std::stoi(entry.substr(4));
    node.cpus = parse_cpu_list(sysfs.read_line("devices/system/node/" + entry + "/cpulist").value_or(""));
    nodes.push_back(std::move(node));
  }
  std::sort(nodes.begin(), nodes.end(), [](const NumaNode& a, const NumaNode& b) { return a.id < b.id; });
  if (nodes.empty()) {
    NumaNode node;
    node.cpus = parse_cpu_list(sysfs.read_line("devices/system/cpu/online").value_or(""));
    nodes.push_back(std::move(node));
  }
  for (NumaNode& node : nodes) node.physical_cores = physical_cores_of(sysfs, node.cpus);
  return nodes;
}

}  // namespace fabric_lib::topology

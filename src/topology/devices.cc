#include "topology/devices.h"

#include <algorithm>

namespace fabric_lib::topology {
namespace {

std::optional<uint32_t> read_hex(const Sysfs& sysfs, const std::string& relative) {
  std::optional<std::string> text = sysfs.read_line(relative);
  if (!text || text->empty()) return std::nullopt;
  try {
    return static_cast<uint32_t>(std::stoul(*text, nullptr, 16));
  } catch (...) {
    return std::nullopt;
  }
}

int read_numa_node(const Sysfs& sysfs, const std::string& device_dir) {
  std::optional<std::string> text = sysfs.read_line(device_dir + "/numa_node");
  if (!text) return -1;
  try {
    return std::stoi(*text);
  } catch (...) {
    return -1;
  }
}

bool is_gpu_class(uint32_t pci_class) {
  const uint32_t base_sub = pci_class >> 8;
  return base_sub == 0x0302 || base_sub == 0x0300;
}

}  // namespace

void describe_pci_function(const Sysfs& sysfs, const std::string& pci_address, int* numa_node,
                           std::vector<std::string>* pci_path) {
  const std::string dir = "bus/pci/devices/" + pci_address;
  if (!sysfs.exists(dir)) return;
  *numa_node = read_numa_node(sysfs, dir);
  if (std::optional<std::string> resolved = sysfs.resolve(dir)) *pci_path = pci_path_of(*resolved);
}

std::vector<GpuDevice> scan_gpus(const Sysfs& sysfs) {
  std::vector<GpuDevice> gpus;
  for (const std::string& bdf : sysfs.list("bus/pci/devices")) {
    const std::string dir = "bus/pci/devices/" + bdf;
    const std::optional<uint32_t> vendor = read_hex(sysfs, dir + "/vendor");
    const std::optional<uint32_t> pci_class = read_hex(sysfs, dir + "/class");
    if (!vendor || !pci_class || *vendor != kNvidiaVendorId || !is_gpu_class(*pci_class)) continue;
    GpuDevice gpu;
    gpu.pci_address = bdf;
    gpu.device_id = static_cast<uint16_t>(read_hex(sysfs, dir + "/device").value_or(0));
    describe_pci_function(sysfs, bdf, &gpu.numa_node, &gpu.pci_path);
    gpus.push_back(std::move(gpu));
  }
  // list() is sorted by name, and PCI addresses sort like CUDA's PCI_BUS_ID order.
  for (size_t i = 0; i < gpus.size(); ++i) gpus[i].index = i;
  return gpus;
}

std::vector<NicDevice> scan_infiniband(const Sysfs& sysfs) {
  std::vector<NicDevice> nics;
  for (const std::string& name : sysfs.list("class/infiniband")) {
    NicDevice nic;
    nic.name = name;
    if (std::optional<std::string> device = sysfs.resolve("class/infiniband/" + name + "/device")) {
      const std::vector<std::string> path = pci_path_of(*device);
      if (path.size() >= 2) {
        nic.pci_address = path.back();
        describe_pci_function(sysfs, nic.pci_address, &nic.numa_node, &nic.pci_path);
        if (nic.pci_path.empty()) nic.pci_path = path;
      }
    }
    nics.push_back(std::move(nic));
  }
  return nics;
}

void merge_fabric_nics(const Sysfs& sysfs, const std::vector<FabricNic>& fabric, std::vector<NicDevice>& nics) {
  for (const FabricNic& f : fabric) {
    auto named_by = [&](const NicDevice& n) {
      if (!f.pci_address.empty() && f.pci_address == n.pci_address) return true;
      if (f.device_name == n.name && !n.name.empty()) return true;
      return f.domain_name == n.name || f.domain_name.rfind(n.name + "-", 0) == 0;
    };
    auto it = std::find_if(nics.begin(), nics.end(), named_by);
    if (it != nics.end()) {
      // The first provider that reports a NIC names it (the caller orders providers by preference).
      if (it->domain_name.empty()) {
        it->domain_name = f.domain_name;
        it->provider = f.provider;
      }
      continue;
    }
    NicDevice nic;
    nic.name = f.device_name.empty() ? f.domain_name : f.device_name;
    nic.domain_name = f.domain_name;
    nic.provider = f.provider;
    nic.pci_address = f.pci_address;
    if (!nic.pci_address.empty()) describe_pci_function(sysfs, nic.pci_address, &nic.numa_node, &nic.pci_path);
    nics.push_back(std::move(nic));
  }
}

}  // namespace fabric_lib::topology

// Finding GPUs and RDMA NICs: PCI functions in sysfs, and the domains libfabric's RDMA providers
// report.
#pragma once

#include <string>
#include <vector>

#include "fabric_lib/topology.h"
#include "topology/sysfs.h"

namespace fabric_lib::topology {

inline constexpr uint32_t kNvidiaVendorId = 0x10de;

// NVIDIA GPUs under bus/pci/devices, in PCI address order, indexed 0...
std::vector<GpuDevice> scan_gpus(const Sysfs& sysfs);
// RDMA devices under class/infiniband, with their PCI function (when they have one).
std::vector<NicDevice> scan_infiniband(const Sysfs& sysfs);
// Fills numa_node and pci_path of the PCI function `pci_address` (left alone when absent).
void describe_pci_function(const Sysfs& sysfs, const std::string& pci_address, int* numa_node,
                           std::vector<std::string>* pci_path);

// One domain a libfabric provider reports.
struct FabricNic {
  std::string provider;
  std::string domain_name;
  std::string device_name;  // the NIC's own name when the provider gives one
  std::string pci_address;  // empty when the provider does not say
};
// fi_getinfo for each provider (RDM endpoints); providers that find nothing contribute nothing.
std::vector<FabricNic> query_libfabric_nics(const std::vector<std::string>& providers);

// Adds `fabric` to `nics`: a domain matching a known NIC (same PCI address, or a domain name that
// is the device name or starts with "<device name>-") names it; others become new NICs.
void merge_fabric_nics(const Sysfs& sysfs, const std::vector<FabricNic>& fabric, std::vector<NicDevice>& nics);

}  // namespace fabric_lib::topology

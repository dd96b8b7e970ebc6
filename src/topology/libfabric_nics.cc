// The libfabric half of NIC discovery (kept apart so the sysfs half needs no libfabric).
#include <rdma/fabric.h>

#include <cstdio>
#include <cstring>

#include "topology/devices.h"

namespace fabric_lib::topology {

std::vector<FabricNic> query_libfabric_nics(const std::vector<std::string>& providers) {
  std::vector<FabricNic> out;
  for (const std::string& provider : providers) {
    fi_info* hints = fi_allocinfo();
    if (!hints) break;
    hints->ep_attr->type = FI_EP_RDM;
    hints->fabric_attr->prov_name = strdup(provider.c_str());
    fi_info* list = nullptr;
    const int ret = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &list);
    fi_freeinfo(hints);
    if (ret != 0) continue;  // the provider is absent or found no device: nothing to add
    for (fi_info* info = list; info; info = info->next) {
      if (!info->domain_attr || !info->domain_attr->name) continue;
      FabricNic nic;
      nic.provider = provider;
      nic.domain_name = info->domain_attr->name;
      if (info->nic && info->nic->device_attr && info->nic->device_attr->name) {
        nic.device_name = info->nic->device_attr->name;
      }
      if (info->nic && info->nic->bus_attr && info->nic->bus_attr->bus_type == FI_BUS_PCI) {
        const fi_pci_attr& pci = info->nic->bus_attr->attr.pci;
        char bdf[16];
        std::snprintf(bdf, sizeof(bdf), "%04x:%02x:%02x.%x", pci.domain_id, pci.bus_id, pci.device_id, pci.function_id);
        nic.pci_address = bdf;
      }
      bool seen = false;
      for (const FabricNic& o : out) seen = seen || (o.provider == nic.provider && o.domain_name == nic.domain_name);
      if (!seen) out.push_back(std::move(nic));
    }
    fi_freeinfo(list);
  }
  return out;
}

}  // namespace fabric_lib::topology

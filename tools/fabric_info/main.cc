// fabric-info: what this machine offers fabric-lib. The libfabric providers with the capabilities
// the engine needs (RMA, remote CQ data, mr_mode, HMEM for GPU memory), then the detected
// topology (GPUs, RDMA NICs, NUMA nodes) and the DomainGroups an engine built with
// TransferEngineBuilder::from_topology() would get.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "fabric_info/providers.h"
#include "fabric_lib/topology.h"

using namespace fabric_lib;

namespace {

std::string yes_no(bool b) { return b ? "yes" : "no"; }

std::string size_text(uint64_t v) {
  if (v >= (1ull << 60)) return "max";  // providers report "unlimited" as values near 2^64
  if (v >= (1ull << 30) && v % (1ull << 30) == 0) return std::to_string(v >> 30) + "G";
  if (v >= (1ull << 20) && v % (1ull << 20) == 0) return std::to_string(v >> 20) + "M";
  if (v >= (1ull << 10) && v % (1ull << 10) == 0) return std::to_string(v >> 10) + "K";
  return std::to_string(v);
}

}  // namespace

int main(int argc, char** argv) {
  std::string provider, sysfs_root = "/sys";
  std::vector<std::string> topology_providers = {"efa", "verbs"};
  bool all_endpoints = false, no_topology = false, no_providers = false;
  CLI::App app{"fabric-info: libfabric providers and machine topology as fabric-lib sees them"};
  app.add_option("--provider", provider, "only this libfabric provider (e.g. tcp, shm, efa)");
  app.add_flag("--all-endpoints", all_endpoints, "also list MSG and DGRAM endpoints (the engine opens RDM only)");
  app.add_option("--sysfs-root", sysfs_root, "read the topology from this sysfs tree")->capture_default_str();
  app.add_option("--topology-providers", topology_providers, "RDMA providers asked for NIC names")
      ->delimiter(',')
      ->capture_default_str();
  app.add_flag("--no-topology", no_topology, "skip the topology");
  app.add_flag("--no-providers", no_providers, "skip the provider list");
  CLI11_PARSE(app, argc, argv);

  if (!no_providers) {
    const std::vector<info::ProviderEntry> entries = info::list_providers(provider, !all_endpoints);
    std::printf("libfabric %s: %zu %s endpoint(s)%s\n", info::libfabric_version().c_str(), entries.size(),
                all_endpoints ? "" : "FI_EP_RDM", provider.empty() ? "" : (" of provider " + provider).c_str());
    std::printf("%-14s %-16s %-18s %-5s %-3s %-3s %-7s %-28s %-4s %-7s %-7s %-7s %-8s %s\n", "provider", "fabric",
                "domain", "ep", "rma", "msg", "cq_data", "mr_mode", "hmem", "tx", "rx", "max_msg", "deliv_cc",
                "fabric-lib");
    for (const info::ProviderEntry& e : entries) {
      std::printf("%-14s %-16s %-18s %-5s %-3s %-3s %-7zu %-28s %-4s %-7s %-7s %-7s %-8s %s\n", e.provider.c_str(),
                  e.fabric.c_str(), e.domain.c_str(), e.endpoint.c_str(), yes_no(e.rma).c_str(), yes_no(e.msg).c_str(),
                  e.cq_data_size, info::mr_mode_text(e.mr_mode).c_str(), yes_no(e.hmem).c_str(),
                  size_text(e.tx_size).c_str(), size_text(e.rx_size).c_str(), size_text(e.max_msg_size).c_str(),
                  yes_no(e.delivery_complete).c_str(), e.usable ? "usable" : "-");
    }
    std::printf("(cq_data = remote CQ data bytes, >= 4 needed for imms; hmem = FI_HMEM, needed to register GPU memory;\n"
                " deliv_cc = grants FI_DELIVERY_COMPLETE; fabric-lib = RDM + MSG + RMA + cq_data >= 4 + keys <= 8 bytes)\n");
  }
  if (!no_topology) {
    TopologyOptions options;
    options.sysfs_root = sysfs_root;
    options.providers = topology_providers;
    Result<Topology> topology = detect_topology(options);
    if (!topology.ok()) {
      std::fprintf(stderr, "fabric-info: %s\n", topology.status().to_string().c_str());
      return 1;
    }
    std::printf("\nTopology (%s):\n%s", sysfs_root.c_str(), topology->describe().c_str());
  }
  return 0;
}

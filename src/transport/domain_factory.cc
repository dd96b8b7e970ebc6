#include "transport/domain_factory.h"

#include "transport/libfabric/fabric_info.h"
#include "transport/libfabric/libfabric_domain.h"
#include "transport/reorder/reordering_domain.h"

namespace fabric_lib::transport {

Result<std::unique_ptr<Domain>> open_domain(const DomainSpec& spec) {
  libfabric::LibfabricDomainOptions options;
  options.provider = spec.provider;
  options.interface_name = spec.interface_name;
  Result<std::unique_ptr<libfabric::LibfabricDomain>> opened = libfabric::LibfabricDomain::open(options);
  if (!opened.ok()) return opened.status();
  std::unique_ptr<Domain> domain = std::move(opened).value();
  if (spec.reorder_seed != 0) domain = std::make_unique<ReorderingDomain>(std::move(domain), spec.reorder_seed);
  return domain;
}

Result<std::vector<std::string>> default_interfaces(const std::string& provider) {
  Result<std::vector<std::string>> names = libfabric::list_domain_names(provider);
  if (!names.ok()) return names.status();
  std::vector<std::string> chosen;
  for (const std::string& n : *names) {
    if (n != "lo") chosen.push_back(n);
  }
  if (chosen.empty()) chosen = *names;
  // On RDMA NICs (efa, verbs) every device is its own NIC and domains spread over them. Socket
  // providers list every IP interface, and only the first is known to reach the peers.
  const bool rdma_nics = provider.rfind("efa", 0) == 0 || provider.rfind("verbs", 0) == 0;
  if (!rdma_nics && chosen.size() > 1) chosen.resize(1);
  return chosen;
}

}  // namespace fabric_lib::transport

#include "transport/domain_factory.h"

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "gpu/memory_kind.h"
#include "transport/libfabric/fabric_info.h"
#include "transport/libfabric/libfabric_domain.h"
#include "transport/nvlink/nvlink_factory.h"
#include "transport/reorder/reordering_domain.h"
#if FABRIC_LIB_HAVE_CUDA
#include "gpu/cuda_copy_engine.h"
#include "gpu/staging_domain.h"
#endif

namespace fabric_lib::transport {
namespace {

// CUDA builds ask providers for FI_HMEM unless FABRIC_LIB_HMEM=0 (then GPU sources are staged).
bool want_hmem() {
  if (!gpu::kHaveCuda) return false;
  const char* env = std::getenv("FABRIC_LIB_HMEM");
  return !(env && std::strcmp(env, "0") == 0);
}

std::mutex decorator_mu;
DomainDecorator& test_decorator() {
  static DomainDecorator decorate;
  return decorate;
}

Result<std::unique_ptr<Domain>> open_undecorated(const DomainSpec& spec);

}  // namespace

void set_domain_decorator_for_testing(DomainDecorator decorate) {
  std::lock_guard lock(decorator_mu);
  test_decorator() = std::move(decorate);
}

Result<std::unique_ptr<Domain>> open_domain(const DomainSpec& spec) {
  Result<std::unique_ptr<Domain>> opened = open_undecorated(spec);
  std::lock_guard lock(decorator_mu);
  if (!opened.ok() || !test_decorator()) return opened;
  return test_decorator()(std::move(opened).value());
}

namespace {

Result<std::unique_ptr<Domain>> open_undecorated(const DomainSpec& spec) {
  if (nvlink::is_nvlink_provider(spec.provider)) {  // same-host GPU<->GPU (and host) over CUDA IPC + shm
    Result<std::unique_ptr<Domain>> nv = nvlink::open_nvlink_domain();
    if (!nv.ok() || spec.reorder_seed == 0) return nv;
    return std::unique_ptr<Domain>(std::make_unique<ReorderingDomain>(std::move(nv).value(), spec.reorder_seed));
  }
  libfabric::LibfabricDomainOptions options;
  options.provider = spec.provider;
  options.interface_name = spec.interface_name;
  options.want_hmem = want_hmem();
  Result<std::unique_ptr<libfabric::LibfabricDomain>> opened = libfabric::LibfabricDomain::open(options);
  if (!opened.ok()) return opened.status();
  std::unique_ptr<Domain> domain = std::move(opened).value();
#if FABRIC_LIB_HAVE_CUDA
  // Every libfabric domain of a CUDA build: a provider reporting FI_HMEM may still turn GPU memory
  // down at registration (Debian's shm does), and the decorator then stages. Host traffic passes
  // straight through; bounce buffers are allocated at the first staged registration only.
  domain = std::make_unique<gpu::StagingDomain>(std::move(domain), gpu::cuda_copy_engine_factory());
#endif
  if (spec.reorder_seed != 0) domain = std::make_unique<ReorderingDomain>(std::move(domain), spec.reorder_seed);
  return domain;
}

}  // namespace

Result<std::vector<std::string>> default_interfaces(const std::string& provider) {
  if (nvlink::is_nvlink_provider(provider)) return std::vector<std::string>{"nvlink"};  // no NICs: one name
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

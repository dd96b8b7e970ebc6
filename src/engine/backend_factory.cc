#include "engine/backend_factory.h"

#include <cstdlib>
#include <map>
#include <mutex>

#include "transport/ipc/gpu_backend.h"
#include "transport/ipc/ipc_factory.h"
#include "transport/libfabric/fabric_info.h"
#include "transport/libfabric/libfabric_domain.h"
#include "transport/reorder/reordering_domain.h"
#if FABRIC_LIB_HAVE_CUDA
#include "transport/staging/staging_domain.h"
#endif

namespace fabric_lib::engine {
namespace {

// One SharedCopies per group: the ipc domains of a group share their GPU copy engine. Groups'
// workers open their domains at the same time, hence the lock.
class GroupCopies {
 public:
  std::shared_ptr<transport::ipc::SharedCopies> of(size_t group) {
    std::lock_guard lock(mu_);
    std::shared_ptr<transport::ipc::SharedCopies>& slot = groups_[group];
    if (!slot) slot = std::make_shared<transport::ipc::SharedCopies>();
    return slot;
  }

 private:
  std::mutex mu_;
  std::map<size_t, std::shared_ptr<transport::ipc::SharedCopies>> groups_;
};

Result<std::unique_ptr<transport::Domain>> open_backend(const BackendOptions& o, GroupCopies& copies,
                                                        const transport::DomainSpec& spec) {
  if (is_ipc_provider(spec.provider)) return transport::ipc::open_ipc_domain(o.ipc_copies, copies.of(spec.group));
  transport::libfabric::LibfabricDomainOptions options;
  options.provider = spec.provider;
  options.interface_name = spec.interface_name;
  options.want_hmem = o.want_hmem;
  options.want_wait_fd = o.want_wait_fd;
  Result<std::unique_ptr<transport::libfabric::LibfabricDomain>> opened =
      transport::libfabric::LibfabricDomain::open(options);
  if (!opened.ok()) return opened.status();
  std::unique_ptr<transport::Domain> domain = std::move(opened).value();
#if FABRIC_LIB_HAVE_CUDA
  // Every libfabric domain of a CUDA build: a provider reporting FI_HMEM may still turn GPU memory
  // down at registration (Debian's shm does), and the decorator then stages. Host traffic passes
  // straight through; bounce buffers are allocated at the first staged registration only.
  domain = std::make_unique<transport::staging::StagingDomain>(std::move(domain),
                                                               transport::staging::cuda_staging_gpu_factory());
#endif
  return domain;
}

// EFA takes a shared-memory shortcut for peers of the same host unless told not to; benchmarks
// and production want the bytes on the NIC. libfabric >= 1.21 offers FI_OPT_SHARED_MEMORY_PERMITTED
// per endpoint (the libfabric domain sets it); older ones only read this variable, at fi_getinfo.
void prepare_provider_environment(const std::string& provider) {
#if !FI_VERSION_GE(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), FI_VERSION(1, 21))
  if (provider.rfind("efa", 0) == 0) setenv("FI_EFA_ENABLE_SHM_TRANSFER", "0", /*overwrite=*/0);
#else
  (void)provider;
#endif
}

}  // namespace

bool is_ipc_provider(const std::string& provider) { return transport::ipc::is_ipc_provider(provider); }

transport::DomainFactory make_backend_factory(BackendOptions options) {
  return [o = std::move(options), copies = std::make_shared<GroupCopies>()](
             const transport::DomainSpec& spec) -> Result<std::unique_ptr<transport::Domain>> {
    prepare_provider_environment(spec.provider);
    Result<std::unique_ptr<transport::Domain>> opened = open_backend(o, *copies, spec);
    if (!opened.ok()) return opened;
    std::unique_ptr<transport::Domain> domain = std::move(opened).value();
    if (o.reorder_seed != 0) {
      const uint64_t seed = o.reorder_seed * 1000 + spec.group * 16 + spec.index;
      domain = std::make_unique<transport::ReorderingDomain>(std::move(domain), seed);
    }
    if (o.decorate) domain = o.decorate(std::move(domain));
    return domain;
  };
}

Result<std::vector<std::string>> default_interfaces(const std::string& provider) {
  if (is_ipc_provider(provider)) return std::vector<std::string>{"ipc"};  // no NICs: one name
  Result<std::vector<std::string>> names = transport::libfabric::list_domain_names(provider);
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

}  // namespace fabric_lib::engine

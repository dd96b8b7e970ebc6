#include "transport/libfabric/fabric_info.h"

#include <rdma/fi_domain.h>
#include <rdma/fi_errno.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace fabric_lib::transport::libfabric {
namespace {

constexpr uint64_t kMrModesWeHandle =
    FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;

FiInfoPtr make_hints(const std::string& provider, bool delivery_complete, bool tagged, bool hmem) {
  FiInfoPtr hints(fi_allocinfo());
  if (!hints) return hints;
  hints->ep_attr->type = FI_EP_RDM;
  // FI_TAGGED carries the liveness probe's control messages, apart from application sends.
  hints->caps = FI_MSG | FI_RMA | FI_WRITE | FI_REMOTE_WRITE | FI_SEND | FI_RECV | (tagged ? FI_TAGGED : 0);
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->domain_attr->mr_mode = static_cast<int>(kMrModesWeHandle);
  if (hmem) {
    // GPU memory registration (FI_HMEM_CUDA); FI_MR_HMEM: we register every buffer we use anyway.
    hints->caps |= FI_HMEM;
    hints->domain_attr->mr_mode |= FI_MR_HMEM;
  }
  hints->domain_attr->threading = FI_THREAD_DOMAIN;
  if (delivery_complete) hints->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
  // fi_freeinfo frees this with free().
  hints->fabric_attr->prov_name = strdup(provider.c_str());
  return hints;
}

bool matches_interface(const fi_info* info, const std::string& name) {
  if (name.empty()) return true;
  const char* domain = info->domain_attr ? info->domain_attr->name : nullptr;
  const char* fabric = info->fabric_attr ? info->fabric_attr->name : nullptr;
  return (domain && name == domain) || (fabric && name == fabric);
}

bool usable(const fi_info* info) {
  return info->domain_attr->cq_data_size >= 4 && info->domain_attr->mr_key_size <= 8 &&
         (info->caps & (FI_RMA | FI_MSG)) == (FI_RMA | FI_MSG);
}

Result<FiInfoPtr> getinfo(const std::string& provider, bool delivery_complete, bool tagged, bool hmem = false) {
  FiInfoPtr hints = make_hints(provider, delivery_complete, tagged, hmem);
  if (!hints) return resource_exhausted("fi_allocinfo failed");
  fi_info* list = nullptr;
  int ret = fi_getinfo(kFiVersion, nullptr, nullptr, 0, hints.get(), &list);
  if (ret != 0) return provider_error("fi_getinfo", ret);
  return FiInfoPtr(list);
}

}  // namespace

Status provider_error(const char* call, int ret) {
  const int code = ret < 0 ? -ret : ret;
  return Status(ErrorCode::kProviderError, std::string(call) + ": " + fi_strerror(code) + " (" + std::to_string(ret) + ")");
}

// EFA grants FI_DELIVERY_COMPLETE only by emulating it (an extra round trip per write, a receipt
// from the target's progress engine), which costs the very bandwidth and latency EFA is used for.
// There the engine asks for transmit-complete writes, as the paper's engine does: a write's Ok then
// means the source may be reused, and the receiver's imm count is the delivery signal
// (docs/providers.md, "What a write's Ok means").
bool wants_delivery_complete(const std::string& provider) { return provider.rfind("efa", 0) != 0; }

bool wants_hmem(const std::string& provider) { return provider.rfind("shm", 0) != 0; }

Result<FiInfoPtr> select_fi_info(const std::string& provider, const std::string& interface_name, bool want_hmem) {
  if (provider.empty()) return invalid_argument("empty provider name");
  const bool dc = wants_delivery_complete(provider);
  if (want_hmem && wants_hmem(provider)) {
    // Providers without FI_HMEM answer -FI_ENODATA: then the plain selection below decides.
    Result<FiInfoPtr> hmem = getinfo(provider, /*delivery_complete=*/dc, /*tagged=*/true, /*hmem=*/true);
    if (!hmem.ok()) hmem = getinfo(provider, /*delivery_complete=*/false, /*tagged=*/true, /*hmem=*/true);
    if (!hmem.ok()) hmem = getinfo(provider, /*delivery_complete=*/false, /*tagged=*/false, /*hmem=*/true);
    if (hmem.ok()) {
      for (fi_info* info = hmem->get(); info; info = info->next) {
        if (!usable(info) || !matches_interface(info, interface_name) || !(info->caps & FI_HMEM)) continue;
        FiInfoPtr copy(fi_dupinfo(info));
        if (!copy) return resource_exhausted("fi_dupinfo failed");
        return copy;
      }
    }
  }
  // Preferred first: delivery-complete writes (but not on EFA), and tagged messages for the
  // liveness probe.
  Result<FiInfoPtr> list = getinfo(provider, /*delivery_complete=*/dc, /*tagged=*/true);
  if (!list.ok()) list = getinfo(provider, dc, false);
  if (!list.ok()) list = getinfo(provider, false, true);
  if (!list.ok()) list = getinfo(provider, false, false);
  if (!list.ok()) {
    return Status(list.status().code(), "provider '" + provider + "' offers no FI_EP_RDM endpoint with FI_MSG+FI_RMA (" +
                                            list.status().message() + ")");
  }
  std::vector<std::string> seen;
  for (fi_info* info = list->get(); info; info = info->next) {
    if (info->domain_attr && info->domain_attr->name) seen.emplace_back(info->domain_attr->name);
    if (!usable(info) || !matches_interface(info, interface_name)) continue;
    FiInfoPtr copy(fi_dupinfo(info));
    if (!copy) return resource_exhausted("fi_dupinfo failed");
    return copy;
  }
  std::string names;
  std::sort(seen.begin(), seen.end());
  seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
  for (const auto& s : seen) names += (names.empty() ? "" : ", ") + s;
  return not_found("provider '" + provider + "' has no usable domain named '" + interface_name +
                   "' (domains: " + (names.empty() ? "none" : names) + ")");
}

Result<std::vector<std::string>> list_domain_names(const std::string& provider) {
  Result<FiInfoPtr> list = getinfo(provider, false, false);
  if (!list.ok()) return list.status();
  std::vector<std::string> names;
  for (fi_info* info = list->get(); info; info = info->next) {
    if (!usable(info) || !info->domain_attr->name) continue;
    std::string name = info->domain_attr->name;
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  return names;
}

}  // namespace fabric_lib::transport::libfabric

#include "fabric_info/providers.h"

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>

#include <algorithm>
#include <cstring>
#include <tuple>

namespace fabric_lib::info {
namespace {

constexpr uint32_t kVersion = FI_VERSION(1, 17);

fi_info* getinfo(const std::string& provider, bool rdm_only, bool delivery_complete) {
  fi_info* hints = fi_allocinfo();
  if (!hints) return nullptr;
  if (rdm_only) hints->ep_attr->type = FI_EP_RDM;
  if (!provider.empty()) hints->fabric_attr->prov_name = strdup(provider.c_str());
  // Accept every mr_mode a provider may ask for, so none is hidden by our hints.
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_RAW | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY |
                                FI_MR_MMU_NOTIFY | FI_MR_RMA_EVENT | FI_MR_ENDPOINT | FI_MR_HMEM;
  hints->mode = ~0ull;
  if (delivery_complete) hints->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
  fi_info* list = nullptr;
  const int ret = fi_getinfo(kVersion, nullptr, nullptr, 0, hints, &list);
  fi_freeinfo(hints);
  return ret == 0 ? list : nullptr;
}

const char* endpoint_name(fi_ep_type t) {
  switch (t) {
    case FI_EP_RDM:
      return "rdm";
    case FI_EP_MSG:
      return "msg";
    case FI_EP_DGRAM:
      return "dgram";
    default:
      return "other";
  }
}

auto key_of(const ProviderEntry& e) { return std::tie(e.provider, e.fabric, e.domain, e.endpoint); }

}  // namespace

std::string libfabric_version() {
  const uint32_t v = fi_version();
  return std::to_string(FI_MAJOR(v)) + "." + std::to_string(FI_MINOR(v));
}

std::string mr_mode_text(uint64_t m) {
  static const std::pair<uint64_t, const char*> kBits[] = {
      {FI_MR_LOCAL, "LOCAL"},       {FI_MR_RAW, "RAW"},           {FI_MR_VIRT_ADDR, "VIRT_ADDR"},
      {FI_MR_ALLOCATED, "ALLOCATED"}, {FI_MR_PROV_KEY, "PROV_KEY"}, {FI_MR_MMU_NOTIFY, "MMU_NOTIFY"},
      {FI_MR_RMA_EVENT, "RMA_EVENT"}, {FI_MR_ENDPOINT, "ENDPOINT"}, {FI_MR_HMEM, "HMEM"}};
  std::string out;
  for (const auto& [bit, name] : kBits) {
    if (m & bit) out += (out.empty() ? "" : "|") + std::string(name);
  }
  return out.empty() ? "none" : out;
}

std::vector<ProviderEntry> list_providers(const std::string& provider, bool rdm_only) {
  std::vector<ProviderEntry> entries;
  fi_info* list = getinfo(provider, rdm_only, false);
  for (fi_info* i = list; i; i = i->next) {
    ProviderEntry e;
    e.provider = i->fabric_attr->prov_name ? i->fabric_attr->prov_name : "";
    e.fabric = i->fabric_attr->name ? i->fabric_attr->name : "";
    e.domain = i->domain_attr->name ? i->domain_attr->name : "";
    e.endpoint = endpoint_name(i->ep_attr->type);
    e.rma = (i->caps & FI_RMA) != 0;
    e.msg = (i->caps & FI_MSG) != 0;
    e.cq_data_size = i->domain_attr->cq_data_size;
    e.mr_mode = static_cast<uint64_t>(i->domain_attr->mr_mode);
    e.hmem = (i->caps & FI_HMEM) != 0;
    e.tx_size = i->tx_attr->size;
    e.rx_size = i->rx_attr->size;
    e.max_msg_size = i->ep_attr->max_msg_size;
    e.usable = i->ep_attr->type == FI_EP_RDM && e.rma && e.msg && e.cq_data_size >= 4 && i->domain_attr->mr_key_size <= 8;
    const bool seen = std::any_of(entries.begin(), entries.end(), [&](const ProviderEntry& o) { return key_of(o) == key_of(e); });
    if (!seen) entries.push_back(std::move(e));
  }
  if (list) fi_freeinfo(list);
  // Which of them grant delivery-complete writes (the engine asks for it; see docs/providers.md).
  fi_info* dc = getinfo(provider, rdm_only, true);
  for (fi_info* i = dc; i; i = i->next) {
    for (ProviderEntry& e : entries) {
      if (e.provider == (i->fabric_attr->prov_name ? i->fabric_attr->prov_name : "") &&
          e.domain == (i->domain_attr->name ? i->domain_attr->name : "") && e.endpoint == endpoint_name(i->ep_attr->type)) {
        e.delivery_complete = (i->tx_attr->op_flags & FI_DELIVERY_COMPLETE) != 0;
      }
    }
  }
  if (dc) fi_freeinfo(dc);
  return entries;
}

}  // namespace fabric_lib::info

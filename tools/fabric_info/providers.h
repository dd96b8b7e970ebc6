// What libfabric offers on this machine, as far as fabric-lib cares: per provider and domain,
// the endpoint type, RMA, remote CQ data, mr_mode, HMEM, queue sizes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fabric_lib::info {

struct ProviderEntry {
  std::string provider;
  std::string fabric;
  std::string domain;
  std::string endpoint;  // "rdm", "msg", "dgram"
  bool rma = false;
  bool msg = false;
  size_t cq_data_size = 0;  // bytes of remote CQ data (fabric-lib needs >= 4)
  uint64_t mr_mode = 0;
  bool hmem = false;
  size_t tx_size = 0;
  size_t rx_size = 0;
  uint64_t max_msg_size = 0;
  bool delivery_complete = false;  // accepted FI_DELIVERY_COMPLETE as a tx op flag
  bool usable = false;             // meets the engine's requirements (docs/providers.md, "Requirements on a libfabric provider")
};

// One entry per distinct (provider, fabric, domain, endpoint type). `provider` = "" lists every
// provider; `rdm_only` keeps FI_EP_RDM endpoints (the only kind the engine opens).
std::vector<ProviderEntry> list_providers(const std::string& provider, bool rdm_only);
// "LOCAL|VIRT_ADDR|PROV_KEY" (or "none").
std::string mr_mode_text(uint64_t mr_mode);
std::string libfabric_version();

}  // namespace fabric_lib::info

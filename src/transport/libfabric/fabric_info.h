// Choosing a libfabric fi_info for one domain: the hints we need, and matching an interface name.
#pragma once

#include <rdma/fabric.h>

#include <memory>
#include <string>
#include <vector>

#include "fabric_lib/status.h"

namespace fabric_lib::transport::libfabric {

struct FiInfoDeleter {
  void operator()(fi_info* info) const { fi_freeinfo(info); }
};
using FiInfoPtr = std::unique_ptr<fi_info, FiInfoDeleter>;

// The libfabric API version we ask for.
inline constexpr uint32_t kFiVersion = FI_VERSION(1, 17);

// fi_strerror text for a negative libfabric return value, with the failing call's name.
Status provider_error(const char* call, int ret);

// Returns a copy of the fi_info to open for `provider` (any libfabric provider string) on the
// domain or fabric named `interface_name` (empty: the provider's first suitable domain).
// Requires FI_EP_RDM + FI_MSG + FI_RMA + remote CQ data of >= 4 bytes; asks for delivery-complete
// writes and falls back without them. With `want_hmem`, first asks for FI_HMEM (GPU memory
// registration) and falls back to a plain endpoint when the provider has none for that domain —
// except on providers where wants_hmem() says no.
Result<FiInfoPtr> select_fi_info(const std::string& provider, const std::string& interface_name, bool want_hmem = false);

// Whether the engine asks `provider` for FI_HMEM when GPU memory on the NIC is wanted. Not on shm:
// libfabric 1.17's shm with FI_HMEM moved host-memory writes at about half the rate of the same
// endpoint without it (31-34 against 57-67 Gbps at 64 KiB on the H200 machine, 2026-12-02), and
// same-host GPU memory goes through the ipc backend or the staging decorator instead
// (docs/providers.md, "GPU memory").
bool wants_hmem(const std::string& provider);

// The distinct domain names the provider offers, in its order (used for default NIC selection).
Result<std::vector<std::string>> list_domain_names(const std::string& provider);

}  // namespace fabric_lib::transport::libfabric

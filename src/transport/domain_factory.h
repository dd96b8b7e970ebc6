// Opens a Domain of the right backend for a provider string. The only place that knows every
// backend; core uses the Domain interface alone.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "transport/domain.h"

namespace fabric_lib::transport {

struct DomainSpec {
  std::string provider;        // libfabric provider string
  std::string interface_name;  // empty = backend default
  uint64_t reorder_seed = 0;   // != 0: wrap in a ReorderingDomain (testing)
};

Result<std::unique_ptr<Domain>> open_domain(const DomainSpec& spec);

// Testing only (fault injection): every domain opened from now on is passed through `decorate`
// before use; an empty function turns it off.
using DomainDecorator = std::function<std::unique_ptr<Domain>(std::unique_ptr<Domain>)>;
void set_domain_decorator_for_testing(DomainDecorator decorate);

// NIC names to use by default for `provider`, in order: every RDMA device for efa/verbs, the
// first non-loopback interface for socket providers (loopback only when nothing else exists).
Result<std::vector<std::string>> default_interfaces(const std::string& provider);

}  // namespace fabric_lib::transport

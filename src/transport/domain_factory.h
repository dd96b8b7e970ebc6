// How core opens domains without knowing any backend: it is handed a DomainFactory (the engine
// layer's backend factory, src/engine/backend_factory.h, or a test's own) and calls it on each
// group's worker thread, after pinning, once per domain.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "transport/domain.h"

namespace fabric_lib::transport {

// What to open as domain `index` of group `group`.
struct DomainSpec {
  std::string provider;        // provider string as configured ("tcp", "efa", "ipc", ...)
  std::string interface_name;  // NIC / fabric name; empty = the backend's default
  size_t group = 0;
  size_t index = 0;
};

using DomainFactory = std::function<Result<std::unique_ptr<Domain>>(const DomainSpec& spec)>;

}  // namespace fabric_lib::transport

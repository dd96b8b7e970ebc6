// Test hooks of TransferEngineBuilder that the public API does not offer: a decorator applied to
// every domain the engine opens (fault injection: a domain whose posts hang, fail or reorder).
// Set on one builder, it affects only the engines that builder builds.
#pragma once

#include <functional>
#include <memory>

#include "fabric_lib/engine_builder.h"
#include "transport/domain.h"

namespace fabric_lib {

using DomainDecorator = std::function<std::unique_ptr<transport::Domain>(std::unique_ptr<transport::Domain>)>;

struct BuilderAccess {
  static void set_domain_decorator(TransferEngineBuilder& builder, DomainDecorator decorate);
};

}  // namespace fabric_lib

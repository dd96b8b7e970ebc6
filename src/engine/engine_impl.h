// What a TransferEngine holds: its core (src/core/engine_core.h).
#pragma once

#include <memory>

#include "core/engine_core.h"
#include "core/engine_options.h"
#include "fabric_lib/transfer_engine.h"

namespace fabric_lib {

struct TransferEngine::Impl {
  // Opens every group's domains; the engine is usable only when this succeeded.
  static Result<std::unique_ptr<Impl>> start(detail::EngineOptions options);
  std::unique_ptr<detail::EngineCore> core;
};

}  // namespace fabric_lib

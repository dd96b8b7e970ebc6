// What a TransferEngine holds: its core (src/core/engine_core.h).
#pragma once

#include <memory>
#include <string>

#include "core/engine_core.h"
#include "core/engine_options.h"
#include "fabric_lib/transfer_engine.h"

namespace fabric_lib {

struct TransferEngine::Impl {
  // Opens every group's domains; the engine is usable only when this succeeded. A non-empty
  // `metrics_endpoint` also starts the Prometheus endpoint (src/exporter/; Unsupported in builds
  // without prometheus-cpp).
  static Result<std::unique_ptr<Impl>> start(detail::EngineOptions options, const std::string& metrics_endpoint);
  std::unique_ptr<detail::EngineCore> core;
  // The exporter::PrometheusEndpoint, type-erased so builds without the exporter compile this
  // header; after `core`, so it stops (no scrape runs) before the core goes.
  std::shared_ptr<void> endpoint;
  std::string endpoint_address;
};

}  // namespace fabric_lib

// The pull endpoint: an HTTP server (prometheus-cpp's Exposer, civetweb inside) that answers
// GET /metrics with a fresh Metrics snapshot in the Prometheus text format. Scrapes run on the
// server's own threads and only read the engine's counters (TransferEngine::metrics()).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "fabric_lib/metrics.h"
#include "fabric_lib/status.h"

namespace prometheus {
class Exposer;
}

namespace fabric_lib::exporter {

class PrometheusEndpoint {
 public:
  using Snapshot = std::function<Metrics()>;

  // Listens on `address` ("host:port"; port 0 = any free port). InvalidArgument when the address
  // is malformed or cannot be bound.
  static Result<std::unique_ptr<PrometheusEndpoint>> start(const std::string& address, Snapshot snapshot);
  ~PrometheusEndpoint();  // stops the server; no scrape runs after it returns

  // "host:port" with the port actually bound.
  const std::string& address() const { return address_; }

 private:
  class Collector;
  PrometheusEndpoint() = default;

  std::shared_ptr<Collector> collector_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::string address_;
};

}  // namespace fabric_lib::exporter

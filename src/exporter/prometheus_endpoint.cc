#include "exporter/prometheus_endpoint.h"

#include <prometheus/collectable.h>
#include <prometheus/exposer.h>

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <thread>

#include "exporter/metric_families.h"

namespace fabric_lib::exporter {

class PrometheusEndpoint::Collector : public prometheus::Collectable {
 public:
  explicit Collector(Snapshot snapshot) : snapshot_(std::move(snapshot)) {}
  std::vector<prometheus::MetricFamily> Collect() const override { return metric_families(snapshot_()); }

 private:
  Snapshot snapshot_;
};

namespace {

// "host:port" with a numeric port 0..65535 and a non-empty host ("[::1]:9464" for IPv6).
bool split_address(const std::string& address, std::string* host, int* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size() || address.size() - colon > 6) return false;
  int p = 0;
  for (size_t i = colon + 1; i < address.size(); ++i) {
    if (address[i] < '0' || address[i] > '9') return false;
    p = p * 10 + (address[i] - '0');
  }
  if (p > 65535) return false;
  *host = address.substr(0, colon);
  *port = p;
  return true;
}

// Opens and at once closes a TCP connection to host:port (a wildcard host: loopback).
void poke(const std::string& address) {
  std::string host;
  int port = 0;
  if (!split_address(address, &host, &port)) return;
  if (host == "0.0.0.0") host = "127.0.0.1";
  if (host == "[::]") host = "::1";
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return;
  for (addrinfo* a = found; a; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const bool connected = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0;
    ::close(fd);
    if (connected) break;
  }
  freeaddrinfo(found);
}

}  // namespace

Result<std::unique_ptr<PrometheusEndpoint>> PrometheusEndpoint::start(const std::string& address, Snapshot snapshot) {
  std::string host;
  int port = 0;
  if (!split_address(address, &host, &port)) {
    return invalid_argument("metrics endpoint '" + address + "' is not host:port (e.g. 127.0.0.1:9464)");
  }
  std::unique_ptr<PrometheusEndpoint> endpoint(new PrometheusEndpoint());
  endpoint->collector_ = std::make_shared<Collector>(std::move(snapshot));
  try {
    // One serving thread: scrapes are rare (seconds apart) and must not compete with workers.
    endpoint->exposer_ = std::make_unique<prometheus::Exposer>(address, /*num_threads=*/1);
  } catch (const std::exception& e) {  // civetweb could not listen there
    return invalid_argument("metrics endpoint " + address + ": " + e.what());
  }
  endpoint->exposer_->RegisterCollectable(endpoint->collector_);
  const std::vector<int> ports = endpoint->exposer_->GetListeningPorts();
  endpoint->address_ = host + ":" + std::to_string(ports.empty() ? port : ports[0]);
  return endpoint;
}

PrometheusEndpoint::~PrometheusEndpoint() {
  // Stopping civetweb joins its listening thread, which polls the socket in 2 s quanta
  // (SOCKET_TIMEOUT_QUANTUM) and sees the stop only after one: a connection (closed at once, so
  // no worker waits on it) wakes it, and stop() takes milliseconds instead of up to 2 s.
  std::atomic<bool> stopped{false};
  std::thread waker([this, &stopped] {
    while (!stopped.load()) {
      poke(address_);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // until the join below returns
    }
  });
  exposer_.reset();  // joins the server's threads before the collector (and its snapshot) go
  stopped = true;
  waker.join();
}

}  // namespace fabric_lib::exporter

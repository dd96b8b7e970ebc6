// Test hosts for the KV roles: one engine, one registered region holding a rank's KV cache and
// its tail area, and a Decoder or Prefiller on it. Used in the test process and, behind text
// commands, in agent processes (kv_agent.h), so either side can be killed.
//
// Prefill caches hold "logical" KV: the byte at (layer, K/V, page, global head, offset) is a
// pattern of those coordinates, the same on every prefill rank (as replicated heads are), so a
// decoder can check exactly what it must have received, whichever replica sent it.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fabric_lib/kv/decoder.h"
#include "fabric_lib/kv/prefiller.h"

namespace fabric_lib::kv::testing {

// Everything a host needs, as "key=value,..." (what agents get on their command line).
struct HostConfig {
  std::string provider = "tcp";
  std::string interface_name = "lo";
  size_t domains = 1;
  uint64_t reorder_seed = 0;
  KvLayout layout{AttentionKind::kGqa, DType::kBF16, 3, 16, 32, 4};
  RankShape rank;
  uint32_t num_pages = 64;
  uint64_t tail_area = 64 * 1024;  // bytes after the cache for tail slots / sources
  uint64_t seed = 1;
  uint32_t heartbeat_ms = 100;
  uint32_t peer_timeout_ms = 1000;
  uint32_t quarantine_ms = 1500;
  uint32_t confirm_timeout_ms = 1500;

  std::string to_string() const;
  static HostConfig parse(const std::string& s);
  std::string name() const;  // for test names
};

// The provider configurations of the integration matrix (tcp, shm, tcp reordered; 1 and 4 domains).
std::vector<HostConfig> provider_matrix();

// Pattern byte of the logical KV cache.
uint8_t kv_byte(uint64_t seed, uint32_t layer, uint32_t kv, uint32_t page, uint32_t head, uint64_t offset);
uint8_t tail_byte(uint64_t seed, const std::string& request, uint64_t offset);

// The KV app's fabric_lib_kv_requests_total{role, state} on `engine`'s MetricsRegistry (read
// through TransferEngine::metrics(), as an operator would); -1 when the series is missing.
inline double kv_requests_metric(const TransferEngine& engine, const std::string& role, const std::string& state) {
  for (const AppMetric& m : engine.metrics().app) {
    if (m.name == "fabric_lib_kv_requests_total" && m.labels == MetricLabels{{"role", role}, {"state", state}}) return m.value;
  }
  return -1;
}

class Host {
 public:
  explicit Host(const HostConfig& config);
  virtual ~Host();
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  TransferEngine& engine() { return *engine_; }
  const HostConfig& config() const { return config_; }
  uint8_t* cache() { return memory_.data(); }
  uint64_t cache_bytes() const { return cache_bytes_; }
  uint8_t* tail_area() { return memory_.data() + cache_bytes_; }
  std::string hash(uint64_t offset, uint64_t length) const;

 protected:
  HostConfig config_;
  Status status_;
  std::unique_ptr<TransferEngine> engine_;
  KvMemoryLayout layout_;
  uint64_t cache_bytes_ = 0;
  std::vector<uint8_t> memory_;
  MrRegistration reg_;
};

class PrefillHost : public Host {
 public:
  explicit PrefillHost(const HostConfig& config);
  ~PrefillHost() override;
  Prefiller& prefiller() { return *prefiller_; }
  // add_request with `pages`; fills the tail source at tail_offset (in the tail area) with the
  // request's tail pattern of `tail_length` bytes.
  Status add(const std::string& id, uint32_t tokens, const std::vector<uint32_t>& pages, uint64_t tail_offset,
             uint64_t tail_length, std::chrono::milliseconds timeout = std::chrono::milliseconds(30000), uint32_t decode_tp = 0);
  // Runs the prefill of `ids` in passes of `chunk` tokens (0 = one pass): every layer, then the tail.
  Status prefill(const std::vector<std::string>& ids, uint32_t chunk);

 private:
  std::unique_ptr<Prefiller> prefiller_;
  std::map<std::string, uint32_t> tokens_;
};

class DecodeHost : public Host {
 public:
  explicit DecodeHost(const HostConfig& config);
  ~DecodeHost() override;
  Decoder& decoder() { return *decoder_; }
  struct Started {
    std::string id;
    uint32_t tokens = 0, first_page = 0;
    std::vector<uint32_t> pages;      // destination pages
    std::vector<uint32_t> src_pages;  // the prefill side's pages (for checking)
    uint64_t tail_offset = 0, tail_length = 0;
    uint32_t prefill_tp = 1;
  };
  Status start(const Started& s, const PrefillInstance& prefill, std::chrono::milliseconds timeout);
  // Waits until every id of `ids` was reported by get_finished; returns id -> status.
  std::map<std::string, Status> wait(const std::vector<std::string>& ids, std::chrono::milliseconds timeout);
  // "ok", or where the received bytes of request `id` differ from the logical cache (every
  // transferred page, every layer, K and V of this rank's heads, and the tail).
  std::string verify(const std::string& id) const;
  // Bytes of pages that no started request named are still zero.
  bool untouched_pages_zero() const;
  const Started* started(const std::string& id) const;

 private:
  std::unique_ptr<Decoder> decoder_;
  std::map<std::string, Started> started_;
  std::map<std::string, Status> done_;
};

}  // namespace fabric_lib::kv::testing

// The raw-libfabric baseline of fabric-bench: the same traffic as the engine's, posted with a plain
// fi_writedata loop on the same provider, the same number of domains (one fabric, domain, CQ, AV
// and RDM endpoint each, like the engine), the same hints (delivery-complete when granted) and the
// same window. Its bandwidth is the provider's ceiling on this machine; the engine is measured
// against it in the same run.
#pragma once

#include <rdma/fabric.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fabric_lib/status.h"

namespace fabric_lib::bench {

// What an initiator needs to write into a target region through one raw domain.
struct RawRemoteDomain {
  std::vector<uint8_t> address;
  uint64_t key = 0;
  uint64_t base = 0;  // remote address of byte 0 (0 when the provider uses offsets)
};
using RawRemoteRegion = std::vector<RawRemoteDomain>;  // one entry per domain

// "addrhex:key:base,addrhex:key:base,..." (travels on the control channel).
std::string encode_raw_region(const RawRemoteRegion& region);
Result<RawRemoteRegion> decode_raw_region(std::string_view text);

// One write of the baseline: `length` bytes from the local region to the remote one, on `domain`.
struct RawWr {
  uint32_t domain = 0;
  uint64_t src_offset = 0;
  uint64_t dst_offset = 0;
  uint64_t length = 0;
};

// Fills `out` (cleared by the caller) with the WRs of request number `index`.
using RawPlanFn = std::function<void(uint64_t index, std::vector<RawWr>& out)>;

struct RawRunResult {
  uint64_t requests = 0;
  uint64_t wrs = 0;
  uint64_t bytes = 0;
  double seconds = 0;
};

// Counts of arrived imms, by the imm's low 8 bits (the benchmark uses small imm values).
using RawImmCounts = std::array<std::atomic<uint64_t>, 256>;

class RawFabric {
 public:
  // Opens `domains` endpoints of `provider` on `interface_name` (a domain or fabric name; empty:
  // the provider's first suitable domain), with the hints the engine uses.
  static Result<std::unique_ptr<RawFabric>> open(const std::string& provider, const std::string& interface_name,
                                                 size_t domains);
  ~RawFabric();
  RawFabric(const RawFabric&) = delete;
  RawFabric& operator=(const RawFabric&) = delete;

  size_t num_domains() const { return endpoints_.size(); }
  std::string provider_name() const;

  // Registers [ptr, ptr + length) on every domain (replacing an earlier registration) and returns
  // what a peer needs to write into it.
  Result<RawRemoteRegion> register_region(void* ptr, size_t length, bool remote_write);
  // Resolves the target's addresses and keys (one per domain, local domain i -> remote domain i).
  Status connect(const RawRemoteRegion& remote);

  // Initiator: runs requests 0, 1, 2, ... (`plan` gives their WRs) with at most `window` of them
  // in flight and at most the provider's tx size of WRs per endpoint, each WR an fi_writedata
  // carrying `imm`. Stops admitting requests after `max_requests` (0 = no limit) or once
  // `duration` has passed (zero = no limit), then drains.
  Result<RawRunResult> run(const RawPlanFn& plan, uint64_t max_requests, std::chrono::duration<double> duration,
                           size_t window, uint32_t imm);

  // The scatter baseline (raw_scatter.cc): `peers` are the target regions of P peers (the entry
  // of each domain). Each iteration posts one fi_writedata of `bytes` to every peer — peer t from
  // source slice t through domain t % domains, into that peer's same domain, imm `imm` — then
  // waits for all P completions. Returns, per iteration, the poster's own time from its first
  // post call to the last one accepted (µs), and `complete_us` the time to the last completion.
  Result<std::vector<double>> scatter(const std::vector<RawRemoteRegion>& peers, uint64_t bytes, size_t iterations,
                                      uint32_t imm, std::vector<double>* complete_us);

  // A zero-length fi_writedata carrying `imm` to the connected peer, through domain 0 (waits
  // for a free context by reading completions).
  Status post_imm(uint32_t imm);
  // The submit baseline: `iterations` times, one fi_writedata of `bytes` from the local region's
  // start to the connected peer (domain 0), carrying `imm`, then its completion awaited. Returns
  // how long each fi_writedata call took (µs), the call's start to its return.
  Result<std::vector<double>> post_call_times(uint64_t bytes, size_t iterations, uint32_t imm, std::chrono::seconds timeout);
  // The imm round-trip baseline: `iterations` times, post_imm(ping) and poll until the peer's
  // answer `pong` arrived (the target's raw poller echoes: raw_echo); returns each round trip (µs).
  Result<std::vector<double>> round_trip(uint32_t ping, uint32_t pong, size_t iterations, std::chrono::seconds timeout);

  // Target: reads every CQ once and counts arrived imms into `counts` (and frees the contexts of
  // its own post_imm calls). Returns the entries read, or an error the provider reported.
  Result<size_t> poll_target(RawImmCounts& counts);

 private:
  struct Endpoint;
  RawFabric() = default;
  std::vector<std::unique_ptr<Endpoint>> endpoints_;
  uint8_t* local_base_ = nullptr;
};

}  // namespace fabric_lib::bench

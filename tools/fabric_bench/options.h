// fabric-bench's settings, as parsed from the command line (main.cc).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace fabric_lib::bench {

enum class Mode { kSingle, kPaged, kImm, kScatter, kSubmit, kPrepared, kMetrics };

struct BenchOptions {
  std::vector<Mode> modes;
  std::string provider = "tcp";
  std::string interface_name;           // "" = provider default
  std::vector<size_t> domains = {1};    // one full sweep per entry (domain scaling)
  bool spin = false;                    // initiator engine: IdlePolicy::kSpin instead of kAdaptive
  bool target_spin = false;             // target engines likewise
  bool trust_provider_calls = false;    // TransferEngineBuilder::trust_provider_calls on both sides
  // How single/paged runs keep the window full: "callback" (each completion callback submits the
  // next request) or "poll" (the calling thread polls a CompletionCounter and submits).
  std::string drive = "callback";

  double duration_s = 0.3;              // per timed run (engine or raw) when iterations == 0
  uint64_t iterations = 0;              // requests per timed run (0 = use duration_s)
  size_t repeats = 1;                   // alternating engine/raw runs; the best of each counts
  size_t window = 16;                   // requests in flight (single, paged)
  // ...but no more bytes in flight than this, so a slow provider drains a 64 MiB window quickly.
  uint64_t max_inflight_bytes = 64ull << 20;

  std::vector<uint64_t> sizes;          // single-write sizes
  uint32_t max_shards = 0;              // single writes' route, RoundRobin{max_shards} (0: the default)
  // ipc: single and paged writes all on this domain (Pinned), -1: the route above / the default.
  int pin_domain = -1;
  std::vector<uint64_t> page_sizes;     // paged-write page sizes
  size_t pages_per_request = 64;
  std::vector<size_t> scatter_peers;    // peer counts of the scatter sweep
  uint64_t scatter_bytes = 4096;        // bytes to each peer
  uint64_t submit_bytes = 4096;         // write size of the submit-overhead and metrics modes
  size_t latency_iterations = 1000;     // imm round trips, scatters and submits per point

  uint64_t max_region_bytes = 256ull << 20;  // cap of each side's registered region
  uint64_t seed = 1;

  std::string format = "table";         // "table" or "csv"
  std::string plot_file;                // PNG of bandwidth vs size (empty = none)
  std::string csv_file;                 // also write the CSV here (empty = none)
  bool progress = true;                 // progress lines on stderr
  std::string only;                     // "engine" or "raw": run one side only (profiling)
  // ipc: also run the paged sweep with each of these GPU copy modes (memcpy, batch, kernel).
  std::vector<std::string> ipc_copy_modes;
};

// Requests in flight for requests of `request_bytes`: the window, capped by max_inflight_bytes
// (at least 1).
size_t window_for(const BenchOptions& options, uint64_t request_bytes);

// Parses "4KiB", "64K", "1MiB", "2M", "1G", "512" (bytes). Returns false on junk.
bool parse_size(const std::string& text, uint64_t* out);
// "1 KiB", "64 KiB", "1 MiB" (exact powers print without decimals).
std::string format_size(uint64_t bytes);
// Sizes from min to max, doubling (both powers of two).
std::vector<uint64_t> power_of_two_range(uint64_t min, uint64_t max, unsigned step_shift = 1);

const char* mode_name(Mode m);
// How many measured points (progress steps) a mode produces with `options`.
size_t points_of(Mode mode, const BenchOptions& options);

}  // namespace fabric_lib::bench

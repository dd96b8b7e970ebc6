// The seven fabric-bench modes. Each verifies the bytes (or imm counts) of at least one full
// iteration at the target before it measures, and appends one Row per measured point.
#pragma once

#include <chrono>
#include <vector>

#include "fabric_bench/initiator.h"
#include "fabric_bench/output.h"
#include "fabric_bench/verify.h"

namespace fabric_lib::bench {

// Single writes of each size (sharded over the domains), engine vs raw fi_writedata.
Status run_single_mode(Initiator& init, std::vector<Row>& rows);
// Paged writes: many pages per request, permuted page indices, stride > page; engine vs raw.
Status run_paged_mode(Initiator& init, std::vector<Row>& rows);
// Imm-only round trips: initiator -> target -> initiator.
Status run_imm_mode(Initiator& init, std::vector<Row>& rows);
// One scatter to P peers: posting time (call to last WR handed to the provider) and completion time.
Status run_scatter_mode(Initiator& init, std::vector<Row>& rows);
// Submit overhead: API call to the request's first WR handed to the provider.
Status run_submit_mode(Initiator& init, std::vector<Row>& rows);
// Submit-call time of plain against prepared requests (paged write, scatter to P peers).
Status run_prepared_mode(Initiator& init, std::vector<Row>& rows);
// Op rate of small writes with the engine's metrics on against off (metrics_mode.cc).
Status run_metrics_mode(Initiator& init, std::vector<Row>& rows);

// --- shared by the modes (regions.cc) -------------------------------------------------------------

// How long a mode waits for one verification, burst or drain before it fails the run.
inline constexpr auto kModeTimeout = std::chrono::seconds(30);

// A patterned source region on the initiator and a zeroed target region, both registered with the
// engine and the raw endpoints (the raw endpoints connected to the target's).
struct BenchRegions {
  AlignedBuffer src;
  MrRegistration src_mr;
  MrDesc dst;
  RawRemoteRegion raw_dst;
  TransferEngine* engine = nullptr;

  BenchRegions() = default;
  BenchRegions(const BenchRegions&) = delete;
  BenchRegions& operator=(const BenchRegions&) = delete;
  ~BenchRegions();
};
Status prepare_regions(Initiator& init, uint64_t bytes, BenchRegions& out);

}  // namespace fabric_lib::bench

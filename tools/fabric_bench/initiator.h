// The initiating side of one fabric-bench configuration (provider x domains): its engine, its raw
// endpoints, the link to the target, and the bookkeeping every mode shares (imm values, progress,
// verification count, timed runs of the engine).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fabric_bench/bench_engine.h"
#include "fabric_bench/options.h"
#include "fabric_bench/output.h"
#include "fabric_bench/peer_link.h"
#include "fabric_bench/raw_fabric.h"
#include "fabric_lib/fabric_lib.h"

namespace fabric_lib::bench {

// Progress lines on stderr: "[k/N] text".
class Progress {
 public:
  Progress(bool enabled, size_t total) : enabled_(enabled), total_(total) {}
  void step(const std::string& text);
  void note(const std::string& text);

 private:
  bool enabled_;
  size_t total_;
  size_t done_ = 0;
};

// Submits request `index` of a workload to the engine.
using EngineSubmitFn = std::function<Result<TransferId>(uint64_t index, uint32_t imm, Completion done)>;

struct EngineRunResult {
  uint64_t requests = 0;
  double seconds = 0;
};

// Busy-waits politely: a few pause instructions, then sched_yield(), so that on a machine with
// fewer cores than busy threads the engine's worker still gets the CPU.
void relax(uint32_t& spins);

class Initiator {
 public:
  Initiator(const BenchOptions& options, PeerLink& peer, EngineConfig config, Progress& progress)
      : options_(options), peer_(peer), config_(std::move(config)), progress_(progress) {}
  ~Initiator();

  // Sets up the target, builds the local engine and opens the raw endpoints.
  Status start();

  const BenchOptions& options() const { return options_; }
  const EngineConfig& config() const { return config_; }
  PeerLink& peer() { return peer_; }
  TransferEngine& engine() { return *engine_; }
  RawFabric& raw() { return *raw_; }
  Progress& progress() { return progress_; }
  const std::string& provider() const { return provider_; }

  // A fresh imm value (1..250; the raw target counts imms by their low 8 bits).
  uint32_t next_imm();
  // Called after every passed verification.
  void note_verified() { ++verified_; }
  uint64_t verified() const { return verified_; }

  // Submits requests 0, 1, ... with at most `window` in flight until `max_requests` were
  // submitted (if non-zero) or `duration` passed, then waits for all of them. Every request must
  // succeed.
  // Every request carries `imm`.
  Result<EngineRunResult> run_engine(const EngineSubmitFn& submit, uint32_t imm, size_t window, uint64_t max_requests,
                                     std::chrono::duration<double> duration);

  // A separate engine for the latency modes (imm, scatter, submit), with the submit clock on and,
  // on machines with at least 4 CPUs, busy-polling: they measure the engine's posting path, not
  // how fast an idle worker wakes up (the paper's engine busy-polls too). Built per mode, so it
  // never spins during bandwidth runs.
  Result<std::unique_ptr<TransferEngine>> build_latency_engine() const;

  // The row skeleton of a point of `mode`.
  Row row(const std::string& mode, uint64_t size) const;

 private:
  const BenchOptions& options_;
  PeerLink& peer_;
  EngineConfig config_;
  Progress& progress_;
  std::unique_ptr<TransferEngine> engine_;
  std::unique_ptr<RawFabric> raw_;
  std::string provider_;
  uint32_t imm_seq_ = 0;
  uint64_t verified_ = 0;
};

}  // namespace fabric_lib::bench

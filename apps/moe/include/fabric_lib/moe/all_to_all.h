// AllToAll: MoE dispatch/combine between the ranks of one expert-parallel group, over a
// TransferEngine (the public API only), with a host proxy thread per rank (docs/moe.md).
//
//   auto a2a = AllToAll::create(config, engine);          // allocates and registers the buffers
//   exchange a2a->local_info() between the ranks           // any channel: torch.distributed, files
//   a2a->connect(all_infos);                               // peer groups, prepared scatters, proxy
//   per step: dispatch_send, dispatch_recv, (experts), combine_send, combine_recv
//
// CPU ranks (device < 0): host buffers; each half runs on the calling thread and returns when done.
// GPU ranks (CUDA builds, device >= 0): device buffers; each half launches a kernel on `stream`
// and returns at once — no host synchronisation, the valid token count may be a device value
// (bound_m), and a CUDA graph of the four calls replays for many steps.
//
// The halves must come in order (dispatch_send, dispatch_recv, combine_send, combine_recv; the
// send and receive halves may be split to overlap compute). A step's buffers are reused only after
// the previous step's writes completed (the halves wait for the proxy's "free" words).
//
// Failure: a dead or silent peer, a malformed count block from a peer, a routing that needs more
// overflow rows than configured, or an engine error ends the step on this rank within
// step_timeout: the abort word stops every waiting half (kernels included) and status() holds the
// reason; every later call returns it. A failed AllToAll cannot be reused; make a new one.
//
// GPU ranks on the proxy path over the same-host ipc backend: every kernel launched while a
// receive half waits must already be loaded (CUDA_MODULE_LOADING=EAGER, or one warm-up launch
// of each before the first step); a lazy load holds the GPU context and the proxy's CUDA copies
// wait behind it until the step fails (docs/moe.md, "Lazy module loading").
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "fabric_lib/moe/args.h"
#include "fabric_lib/moe/config.h"
#include "fabric_lib/status.h"
#include "fabric_lib/transfer_engine.h"

namespace fabric_lib::moe {

// Timestamps (steady_clock ns) of one step as the proxy saw it, for the benchmark.
struct ProxyStepTimes {
  uint64_t step = 0;
  uint64_t routes_seen_ns = 0;      // saw the routes-ready word
  uint64_t routes_submit_ns = 0;    // about to submit the route scatter (after validating the block)
  uint64_t routes_posted_ns = 0;    // the route scatter was submitted
  uint64_t private_posted_ns = 0;   // the speculative private writes were submitted
  uint64_t routes_arrived_ns = 0;   // saw every peer's routes (and planned)
  uint64_t overflow_posted_ns = 0;
  uint64_t combine_seen_ns = 0;
  uint64_t combine_posted_ns = 0;
  uint64_t done_ns = 0;             // every write completed and everything arrived
  uint64_t posting_ns = 0;          // time spent inside submit calls this step
  uint64_t routes_gpu_ns = 0;       // GPU rank: globaltimer when the kernel set routes ready
};

namespace detail {
struct AllToAllImpl;
}

class AllToAll {
 public:
  // `engine` must outlive the AllToAll and have config.world_size peers' worth of imm values
  // free (config.imm_base .. +3). `device` < 0: a CPU rank.
  static Result<std::unique_ptr<AllToAll>> create(const MoeConfig& config, TransferEngine& engine, int device = -1);
  ~AllToAll();  // stops the proxy, unregisters and frees the buffers
  AllToAll(const AllToAll&) = delete;
  AllToAll& operator=(const AllToAll&) = delete;

  // This rank's RankInfo bytes (wire.h) for the others.
  std::vector<uint8_t> local_info() const;
  // Every rank's local_info(), indexed by rank (this rank's own included). Validates them
  // (versions, fingerprints, ranks, descriptors), prepares the scatters, registers the repeating
  // expectations and starts the proxy. Call once.
  Status connect(std::span<const std::vector<uint8_t>> infos);

  // The halves (args.h). `stream` is a cudaStream_t on GPU ranks, ignored on CPU ranks.
  Status dispatch_send(const DispatchSendArgs& args, void* stream = nullptr);
  Status dispatch_recv(const DispatchRecvArgs& args, void* stream = nullptr);
  Status combine_send(const CombineSendArgs& args, void* stream = nullptr);
  Status combine_recv(const CombineRecvArgs& args, void* stream = nullptr);

  // Ends the step stream: waits until this rank's last step is complete (its writes done) and
  // then for every peer to reach the same point (a barrier of imms base+3 through the engine).
  // Call it on every rank before destroying the AllToAll or stopping the engine: a rank that
  // tears down while a peer still waits for its last writes can lose them (a closing tcp
  // connection discards what the peer has not read yet). Steps may not follow. GPU ranks: it
  // synchronizes the device first. Path::kDirect: the engine carries nothing, so there is no
  // barrier here: the ranks must meet in one of their own (torch.distributed) after finish().
  Status finish(std::chrono::milliseconds timeout);

  // ok, or the failure that ended this AllToAll.
  Status status() const;
  const MoeConfig& config() const;
  const Geometry& geometry() const;
  BufferPlan buffers() const;
  bool on_gpu() const;
  // Steps whose dispatch_send was issued (host count; on GPU ranks graph replays are not seen here).
  uint64_t steps_issued() const;
  std::vector<ProxyStepTimes> take_proxy_times();

 private:
  explicit AllToAll(std::unique_ptr<detail::AllToAllImpl> impl);
  std::unique_ptr<detail::AllToAllImpl> impl_;
};

}  // namespace fabric_lib::moe

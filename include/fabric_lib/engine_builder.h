// TransferEngineBuilder: every setting of a TransferEngine, validated by build().
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fabric_lib/health.h"
#include "fabric_lib/idle_policy.h"
#include "fabric_lib/status.h"
#include "fabric_lib/transfer_engine.h"

namespace fabric_lib {

struct Topology;  // fabric_lib/topology.h

// Configures and builds a TransferEngine. Setters record values; build() validates them all and
// returns the first problem as a Status.
class TransferEngineBuilder {
 public:
  TransferEngineBuilder();
  ~TransferEngineBuilder();
  TransferEngineBuilder(const TransferEngineBuilder&);
  TransferEngineBuilder& operator=(const TransferEngineBuilder&);

  // Any libfabric provider string: "tcp", "shm", "udp;ofi_rxd", "efa", "verbs;ofi_rxm", ..., or
  // "ipc" (alias "nvlink"): the same-host IPC backend — CUDA IPC for GPU memory,
  // process_vm_writev for host memory, a shared-memory ring for imms and messages; processes of
  // one host only (docs/gpu.md). Default "tcp"; the environment variable FABRIC_LIB_PROVIDER
  // overrides it.
  TransferEngineBuilder& provider(std::string name);
  // Domains (NICs) per group, 1..16 (default 1). Peers must use the same number.
  TransferEngineBuilder& domains_per_group(size_t n);
  // Number of groups (one per GPU, typically), each with its own worker (default 1).
  TransferEngineBuilder& groups(size_t n);
  // Domain or fabric names (e.g. "lo", "eth0", "rdmap16s27"); domain i of a group uses entry
  // i % size. Empty (default): the provider's own NICs, loopback last.
  TransferEngineBuilder& interfaces(std::vector<std::string> names);
  // Overrides interfaces() for one group.
  TransferEngineBuilder& group_interfaces(size_t group, std::vector<std::string> names);
  // Pins the worker of `group` to `cpu` (its domains are opened after pinning).
  TransferEngineBuilder& pin_worker(size_t group, int cpu);
  // Pins the UVM watcher thread (alloc_uvm_watcher) to `cpu` (default: not pinned).
  TransferEngineBuilder& pin_watcher(int cpu);
  // kSpin also opens completion queues without wait objects (FI_WAIT_NONE), as a raw polling
  // loop does; kAdaptive (default) asks for fds to block on.
  TransferEngineBuilder& idle_policy(IdlePolicy policy);
  // A submit that finds its group's worker between passes or asleep posts its WRs on the calling
  // thread instead of handing the request over (default true): submit-to-post without a thread
  // hop. Completions are reaped by the worker, or by a thread that calls TransferEngine::progress().
  // Off: every request goes through the worker, and progress() does nothing. Never on for a group
  // whose provider may block forever in a call when a peer dies (shm): there the worker makes
  // every call, so only it can be stranded. Caveat elsewhere: a provider call that never returns
  // (docs/failure-semantics.md, "A provider that never returns") strands the thread that made it,
  // which may be the submitter's; the group is still given up on and stop() still returns.
  TransferEngineBuilder& post_on_caller_thread(bool on);
  // Default false. On: post_on_caller_thread and progress() apply to shm too, whose calls may
  // never return once a peer dies holding a lock in its shared memory. A peer killed at the wrong
  // moment then strands the submitting (or progress()-calling) thread for good — the group is
  // given up on, the thread is not. For hosts where a dead peer ends the job anyway; it makes an
  // shm submit about 1 us instead of the worker's wake-up (docs/benchmarks.md).
  TransferEngineBuilder& trust_provider_calls(bool on);
  // Caps the WRs outstanding per domain (default: the provider's tx queue size).
  TransferEngineBuilder& max_inflight_per_domain(size_t n);
  // Largest submit_send message (default 64 KiB).
  TransferEngineBuilder& max_message_bytes(size_t n);
  // Distinct imm values the ImmCounter holds (default ImmCounter::kDefaultCapacity).
  TransferEngineBuilder& imm_table_capacity(size_t n);
  // CUDA builds: register GPU memory with the NIC (FI_HMEM) where the provider offers it (default
  // true; never asked of shm, whose host-memory writes it halves: docs/providers.md). Off: GPU
  // memory is only ever a staged source on libfabric providers. The environment variable
  // FABRIC_LIB_HMEM=0 turns it off too.
  TransferEngineBuilder& gpu_memory_on_nic(bool on);
  // How the same-host IPC backend copies into GPU memory: "auto" (default: a page-copy kernel for
  // batches of small GPU-to-GPU copies, cudaMemcpyAsync otherwise), "memcpy", "batch"
  // (cudaMemcpyBatchAsync) or "kernel". The environment variable FABRIC_LIB_IPC_COPY overrides it.
  TransferEngineBuilder& ipc_gpu_copies(std::string mode);
  // CUDA builds: a flush of the IPC backend's GPU copies with at least this many page copies (a
  // paged write's pages, each other copy one; default 2048) is issued by the copy engine's
  // launcher thread, smaller ones on the group's worker; 0: no launcher thread. docs/gpu.md has
  // the measurements. The environment variable FABRIC_LIB_IPC_LAUNCHER_COPIES overrides it.
  TransferEngineBuilder& ipc_launcher_copies(size_t copies);
  // Wraps every domain in a reordering layer that posts each window of WRs in a shuffled order
  // and holds back some completions and imms: the unordered delivery of EFA, on any provider.
  // For testing applications (and this library) against reordering. Seed 0 = off.
  TransferEngineBuilder& simulate_unordered_network(uint64_t seed);
  // --- failure handling (docs/failure-semantics.md) ---
  // Deadline of requests whose Completion carries none (default: none).
  TransferEngineBuilder& default_timeout(std::chrono::nanoseconds timeout);
  // A path (local domain -> peer) with WRs in flight and no completion (nor probe answer) for this
  // long is declared failed (default 10 s; 0 turns stall detection off). A group worker stuck
  // inside one provider call for this long is given up on: its requests fail with ProviderError,
  // later calls on that group fail at once, stop() returns, and stats().groups_abandoned counts it.
  TransferEngineBuilder& stall_timeout(std::chrono::nanoseconds timeout);
  // After a peer became unreachable, new requests to it fail at once for this long; the next one
  // after it tries the peer again (default 1 s).
  TransferEngineBuilder& peer_retry_interval(std::chrono::nanoseconds interval);
  // Pings every path with WRs in flight (and every failed path, to notice recovery) each
  // `interval`; `misses` unanswered pings in a row fail the path. Off by default.
  TransferEngineBuilder& liveness_probe(std::chrono::nanoseconds interval, uint32_t misses);
  // Called on the callback thread when a path or peer fails or recovers.
  TransferEngineBuilder& on_health_event(HealthCallback callback);
  // Records the submit-call-to-first-post latency and the posting time (to the last WR posted)
  // of every request (benchmarks; costs one clock read per submit and two per request posted).
  // Read them with TransferEngine::take_submit_latencies_ns() and take_posting_times_ns().
  TransferEngineBuilder& record_submit_latency(bool on);
  // --- observability (docs/operations.md) ---
  // Latency histograms (request, submit-to-post, per-peer WR) and per-peer metrics (default
  // true). Off: TransferEngine::metrics() keeps the counters per operation type and domain and
  // the health events, and the hot path reads no clock for them.
  TransferEngineBuilder& metrics(bool on);
  // Serves TransferEngine::metrics() in the Prometheus text format over HTTP at
  // http://<address>/metrics, e.g. "127.0.0.1:9464" or "0.0.0.0:9464"; port 0 picks a free one
  // (TransferEngine::metrics_endpoint() tells which). Off by default ("" = off); the environment
  // variable FABRIC_LIB_METRICS_ADDR overrides it. build() fails with Unsupported when the
  // library was built without prometheus-cpp, and with InvalidArgument when it cannot listen there.
  TransferEngineBuilder& metrics_endpoint(std::string address);
  // One group per group of `topology` (detect_topology(), fabric_lib/topology.h) with
  // `nets_per_gpu` domains each: group g uses topology.group_interfaces(g) (domain i on entry
  // i % count, so a group with fewer NICs reuses them) and pins its worker to the group's
  // worker_cpu (and the UVM watcher thread to group 0's watcher_cpu). nets_per_gpu = 0 takes the
  // smallest NIC count of any group (at least 1). A group without NICs keeps interfaces(). Replaces earlier groups / group_interfaces / pin_worker
  // settings; choose the provider separately (e.g. "efa" for the NICs detect_topology named).
  TransferEngineBuilder& from_topology(const Topology& topology, size_t nets_per_gpu);

  Result<std::unique_ptr<TransferEngine>> build() const;

  struct Options;  // the recorded settings (defined by the library)

 private:
  friend struct BuilderAccess;  // the library's test hooks
  std::unique_ptr<Options> options_;
};

}  // namespace fabric_lib

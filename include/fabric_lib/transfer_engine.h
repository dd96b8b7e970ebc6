// TransferEngine: RDMA-style point-to-point transfers (WRITE, WRITE_WITH_IMM, SEND/RECV) over
// one or more groups of domains (NICs), with imm counting that assumes no network ordering.
//
// THREAD SAFETY. Every method of TransferEngine may be called from any thread, concurrently,
// including from inside completion, receive and imm callbacks, with two exceptions:
//   - stop() (and the destructor) must not be called from a callback: stop() returns
//     FailedPrecondition there, since it waits for the callback thread to finish.
//   - register_memory() / unregister_memory() / add_peer_group() / forget_peer() wait for the
//     group's worker to apply them (microseconds); they are safe from callbacks, but a callback
//     that registers memory delays the callbacks queued behind it.
// Submits never block: they validate, queue the request for the group's worker and return.
//
// COMPLETION. A submit either fails synchronously with a Status and has no side effect, or is
// accepted (returns a TransferId) and later completes exactly once through its Completion: Ok,
// or an error with a reason (provider error, Cancelled by stop()). A write's Ok means the source
// buffer may be reused and, where the provider grants delivery-complete semantics (tcp, shm,
// udp;ofi_rxd, efa), that the bytes have reached the target. Use imm counting at the target to
// learn that data arrived.
#pragma once

#include <cstddef>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "fabric_lib/completion.h"
#include "fabric_lib/domain_address.h"
#include "fabric_lib/imm_counter.h"
#include "fabric_lib/memory.h"
#include "fabric_lib/requests.h"
#include "fabric_lib/status.h"
#include "fabric_lib/uvm_watcher.h"

namespace fabric_lib {

using TransferId = uint64_t;

// How a group's worker waits when there is nothing to do.
enum class IdlePolicy : uint8_t {
  kSpin,      // poll continuously: lowest latency, one busy core per group
  kAdaptive,  // spin briefly after activity, then block on the completion queue's fd (or back off)
};

// Receives one message posted with submit_send. The bytes are valid only during the call.
using RecvCallback = std::function<void(std::span<const uint8_t> message)>;
// Reports a failed receive (e.g. a message longer than the posted buffer) or, once, Cancelled
// at stop().
using RecvErrorCallback = std::function<void(const Status& status)>;

struct Topology;  // fabric_lib/topology.h

namespace detail {
struct PeerGroupData;
class EngineCore;
}  // namespace detail

// A fixed set of destination regions resolved once (address-vector entries inserted ahead of
// time), for repeated scatters to the same peers (e.g. MoE dispatch). Cheap to copy.
class PeerGroup {
 public:
  PeerGroup() = default;
  size_t size() const;
  const MrDesc& desc(size_t i) const;
  bool empty() const { return data_ == nullptr; }

 private:
  friend class detail::EngineCore;
  std::shared_ptr<const detail::PeerGroupData> data_;
};

// How well a peer (a remote group, named by its main address) can be reached.
enum class PeerHealth : uint8_t {
  kHealthy,      // every path (local domain i <-> the peer's domain i) works
  kDegraded,     // some paths failed; traffic uses the others
  kUnreachable,  // no path works: its operations fail with PeerUnreachable
};

struct PeerStatus {
  DomainAddress address;        // the peer's domain-0 address
  PeerHealth health = PeerHealth::kHealthy;
  std::vector<bool> paths_up;   // per domain of the group
  uint32_t inflight = 0;        // WRs in flight to it
  Status last_error;
};

// A change of a path's or a peer's health, reported to TransferEngineBuilder::on_health_event.
struct HealthEvent {
  size_t group = 0;
  DomainAddress peer;
  int domain = -1;     // the path that changed; -1 when the whole peer changed
  bool up = false;     // the path (or peer) works again
  PeerHealth health = PeerHealth::kHealthy;  // the peer's health after the change
  Status reason;
};
using HealthCallback = std::function<void(const HealthEvent& event)>;

// Counters of an engine's activity since it was built.
struct EngineStats {
  uint64_t requests_submitted = 0;
  uint64_t requests_completed = 0;  // delivered Ok
  uint64_t requests_failed = 0;     // delivered with an error (Cancelled included)
  uint64_t wrs_posted = 0;
  uint64_t imms_received = 0;
  uint64_t messages_received = 0;
  uint64_t deadlines_exceeded = 0;  // requests ended by their deadline
  uint64_t paths_failed = 0;        // path failures (a domain to a peer)
  uint64_t peers_unreachable = 0;   // times a peer became unreachable
  uint64_t groups_abandoned = 0;    // groups whose worker got stuck inside the provider (README, Failure semantics)
};

class TransferEngine {
 public:
  ~TransferEngine();  // calls stop() if needed
  TransferEngine(const TransferEngine&) = delete;
  TransferEngine& operator=(const TransferEngine&) = delete;

  // --- identity -----------------------------------------------------------------------------
  // Address of domain 0 of group 0: where submit_send() messages for this engine go.
  DomainAddress main_address() const;
  // Addresses of every domain of `group` (empty when out of range).
  std::vector<DomainAddress> domain_addresses(size_t group = 0) const;
  size_t num_groups() const;
  size_t num_domains() const;  // per group
  std::string provider() const;  // as resolved, e.g. "tcp;ofi_rxm"

  // --- memory -------------------------------------------------------------------------------
  // Registers [ptr, ptr + length) on every domain of `group`. `kind` says where the memory lives
  // (kAuto: detect it with cudaPointerGetAttributes). GPU memory (kCuda) needs a CUDA build; on a
  // provider without working FI_HMEM it can only be a local source (writes from it are staged
  // through pinned host buffers): Access::kRemoteWrite is then Unsupported, with the reason and
  // the alternatives (see memory.h and the README's "GPU" section).
  Result<MrRegistration> register_memory(void* ptr, size_t length, Access access,
                                         MemoryKind kind = MemoryKind::kHost, size_t group = 0);
  // Forgets a registration. New submits naming it fail with NotFound; the provider's
  // registration is closed once requests already accepted with it have completed.
  Status unregister_memory(MrHandle handle);

  // --- two-sided messages -------------------------------------------------------------------
  // Sends a copy of `message` (<= max_message_bytes) to the engine whose main_address() is `dst`.
  Result<TransferId> submit_send(const DomainAddress& dst, std::span<const uint8_t> message, Completion done);
  // Posts `count` receive buffers of `max_length` bytes. Each arriving message is handed to
  // `on_recv` on the callback thread, then the buffer is posted again ("bouncing" receives).
  Status post_recvs(size_t count, size_t max_length, RecvCallback on_recv, RecvErrorCallback on_error = {});

  // --- one-sided writes ---------------------------------------------------------------------
  // A zero-length write carrying `imm` to the owner of `dst` (kImmCountOfImmOnly imm there).
  Result<TransferId> submit_imm(uint32_t imm, const MrDesc& dst, Completion done, size_t group = 0);
  // A contiguous write, sharded over the group's domains (see requests.h).
  Result<TransferId> submit_write(WriteRequest request, Completion done);
  Result<TransferId> submit_paged_writes(PagedWriteRequest request, Completion done);
  Result<TransferId> submit_scatter(ScatterRequest request, Completion done);
  // An imm to each of `peers`, spread over the domains; completes when all were delivered.
  Result<TransferId> submit_barrier(uint32_t imm, std::span<const MrDesc> peers, Completion done, size_t group = 0);

  // Resolves `peers` once for submit_scatter(); every descriptor must be writable and come from a
  // group of num_domains() domains.
  Result<PeerGroup> add_peer_group(std::span<const MrDesc> peers, size_t group = 0);
  // Removes the peer owning `desc` from every address vector of `group`. Only call it when no
  // request to that peer is in flight; later requests re-insert it.
  Status forget_peer(const MrDesc& desc, size_t group = 0);

  // --- imm counting -------------------------------------------------------------------------
  ImmCounter& imms();

  // --- GPU progress (fabric_lib/uvm_watcher.h) ------------------------------------------------
  // A 64-bit word in mapped pinned host memory that kernels write (device_ptr()) and the engine's
  // watcher thread polls, calling `callback(old, new)` on every change it sees (see WatchCallback:
  // it runs on the watcher thread, must be quick, may submit). The thread starts with the first
  // watcher, pinned where TransferEngineBuilder::pin_watcher says; it polls continuously under
  // IdlePolicy::kSpin, otherwise it sleeps between polls after a quiet spell. Unsupported without
  // CUDA (build or device); Stopped after stop(), which also ends watching (the words stay valid).
  Result<UvmWatcher> alloc_uvm_watcher(WatchCallback callback);

  // --- lifecycle ----------------------------------------------------------------------------
  // Completes every accepted, unfinished operation with Cancelled (and imm expectations too),
  // waits for their callbacks to run, closes the domains and joins the threads. Idempotent.
  // After stop(), every submit returns Stopped.
  Status stop();
  bool stopped() const;
  // True on the engine's callback thread (where completion, receive and imm callbacks run).
  bool on_callback_thread() const;

  EngineStats stats() const;
  // With TransferEngineBuilder::record_submit_latency(true): the time from each submit call's
  // start to its first WR handed to the provider, in ns, since the last call (then cleared).
  std::vector<uint32_t> take_submit_latencies_ns();
  // Health of every peer `group` has talked to.
  std::vector<PeerStatus> peer_status(size_t group = 0);

 private:
  friend class TransferEngineBuilder;
  explicit TransferEngine(std::unique_ptr<detail::EngineCore> core);
  std::unique_ptr<detail::EngineCore> core_;
};

// Configures and builds a TransferEngine. Setters record values; build() validates them all and
// returns the first problem as a Status.
class TransferEngineBuilder {
 public:
  TransferEngineBuilder();
  ~TransferEngineBuilder();
  TransferEngineBuilder(const TransferEngineBuilder&);
  TransferEngineBuilder& operator=(const TransferEngineBuilder&);

  // Any libfabric provider string: "tcp", "shm", "udp;ofi_rxd", "efa", "verbs;ofi_rxm", ...
  // (default "tcp"; the environment variable FABRIC_LIB_PROVIDER overrides it).
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
  TransferEngineBuilder& idle_policy(IdlePolicy policy);
  // Caps the WRs outstanding per domain (default: the provider's tx queue size).
  TransferEngineBuilder& max_inflight_per_domain(size_t n);
  // Largest submit_send message (default 64 KiB).
  TransferEngineBuilder& max_message_bytes(size_t n);
  // Distinct imm values the ImmCounter holds (default ImmCounter::kDefaultCapacity).
  TransferEngineBuilder& imm_table_capacity(size_t n);
  // Wraps every domain in a reordering layer that posts each window of WRs in a shuffled order
  // and holds back some completions and imms: the unordered delivery of EFA, on any provider.
  // For testing applications (and this library) against reordering. Seed 0 = off.
  TransferEngineBuilder& simulate_unordered_network(uint64_t seed);
  // --- failure handling (see the README's "Failure semantics") ---
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
  // Records the submit-call-to-first-post latency of every request (benchmarks; costs one clock
  // read per submit). Read it with TransferEngine::take_submit_latencies_ns().
  TransferEngineBuilder& record_submit_latency(bool on);
  // One group per group of `topology` (detect_topology(), fabric_lib/topology.h) with
  // `nets_per_gpu` domains each: group g uses topology.group_interfaces(g) (domain i on entry
  // i % count, so a group with fewer NICs reuses them) and pins its worker to the group's
  // worker_cpu (and the UVM watcher thread to group 0's watcher_cpu). nets_per_gpu = 0 takes the
  // smallest NIC count of any group (at least 1). A group without NICs keeps interfaces(). Replaces earlier groups / group_interfaces / pin_worker
  // settings; choose the provider separately (e.g. "efa" for the NICs detect_topology named).
  TransferEngineBuilder& from_topology(const Topology& topology, size_t nets_per_gpu);

  Result<std::unique_ptr<TransferEngine>> build() const;

  struct Options;  // the recorded settings (internal)

 private:
  std::unique_ptr<Options> options_;
};

}  // namespace fabric_lib

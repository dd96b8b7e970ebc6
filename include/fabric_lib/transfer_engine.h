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
#include "fabric_lib/health.h"
#include "fabric_lib/imm_counter.h"
#include "fabric_lib/memory.h"
#include "fabric_lib/metrics.h"
#include "fabric_lib/peer_group.h"
#include "fabric_lib/prepared.h"
#include "fabric_lib/requests.h"
#include "fabric_lib/stats.h"
#include "fabric_lib/status.h"
#include "fabric_lib/uvm_watcher.h"

namespace fabric_lib {

// Built by TransferEngineBuilder (fabric_lib/engine_builder.h).
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
  // the alternatives (see memory.h and docs/gpu.md).
  Result<MrRegistration> register_memory(void* ptr, size_t length, Access access,
                                         MemoryKind kind = MemoryKind::kHost, size_t group = 0);
  // Forgets a registration. New submits naming it fail with NotFound; the provider's
  // registration is closed once requests already accepted with it have completed.
  Status unregister_memory(MrHandle handle);

  // --- two-sided messages -------------------------------------------------------------------
  // Sends a copy of `message` (<= max_message_bytes) to the engine whose main_address() is `dst`.
  Result<TransferId> submit_send(const DomainAddress& dst, std::span<const uint8_t> message, Completion done);
  // Sends `length` bytes at `offset` of a registered host region of group 0 straight from where
  // they are, without a copy: they must stay unchanged until `done` completes.
  Result<TransferId> submit_send(const DomainAddress& dst, MrHandle src, uint64_t offset, uint64_t length,
                                 Completion done);
  // Posts `count` receive buffers of `max_length` bytes. Each arriving message is handed to
  // `on_recv` on the callback thread, then the buffer is posted again ("bouncing" receives).
  Status post_recvs(size_t count, size_t max_length, RecvCallback on_recv, RecvErrorCallback on_error = {});
  // Like post_recvs, into the caller's registered host region of group 0: `count` buffers of
  // `slot_bytes` from `offset`. A message is handed to `on_recv` where it landed (no copy); its
  // buffer is posted again once the callback returned. The region must stay registered while the
  // engine runs (the engine holds its registration open).
  Status post_recvs_into(MrHandle region, uint64_t offset, size_t slot_bytes, size_t count, RecvCallback on_recv,
                         RecvErrorCallback on_error = {});

  // --- one-sided writes ---------------------------------------------------------------------
  // A zero-length write carrying `imm` to the owner of `dst` (kImmCountOfImmOnly imm there).
  Result<TransferId> submit_imm(uint32_t imm, const MrDesc& dst, Completion done, size_t group = 0);
  // A contiguous write, sharded over the group's domains (see requests.h).
  Result<TransferId> submit_write(WriteRequest request, Completion done);
  // A paged write's request is taken either way: by const reference the caller keeps it to submit
  // again (its page lists are copied into the engine's recycled request, whose buffers keep their
  // capacity: no allocation once warm); by rvalue its lists are taken, not copied.
  Result<TransferId> submit_paged_writes(const PagedWriteRequest& request, Completion done);
  Result<TransferId> submit_paged_writes(PagedWriteRequest&& request, Completion done);
  // A scatter's request is only read: keep it and submit it again, no allocation once warm.
  // Targets naming the same descriptor cost one reference and one check (and their WRs may go out
  // together): name a peer's region by one MrDesc (copies of it count as one).
  Result<TransferId> submit_scatter(const ScatterRequest& request, Completion done);
  // An imm to each of `peers`, spread over the domains; completes when all were delivered.
  Result<TransferId> submit_barrier(uint32_t imm, std::span<const MrDesc> peers, Completion done, size_t group = 0);

  // --- prepared requests (fabric_lib/prepared.h) ----------------------------------------------
  // Validates and plans once; each submit_prepared names only its pages / slices and imm, is
  // checked against the prepared bounds, and is then an ordinary request (one completion).
  Result<PreparedPagedWrites> prepare_paged_writes(const PagedWriteTemplate& t);
  Result<TransferId> submit_prepared(const PreparedPagedWrites& prepared, std::span<const uint32_t> src_pages,
                                     std::span<const uint32_t> dst_pages, std::optional<uint32_t> imm, Completion done);
  Result<PreparedScatter> prepare_scatter(const ScatterTemplate& t);
  // One slice per prepared target, in order.
  Result<TransferId> submit_prepared(const PreparedScatter& prepared, std::span<const ScatterSlice> slices,
                                     std::optional<uint32_t> imm, Completion done);

  // --- cancellation ---------------------------------------------------------------------------
  // Cancels an accepted request: WRs not yet posted are dropped, posted ones are awaited (their
  // completions absorbed), then it completes exactly once with Cancelled — or with the outcome it
  // already had (a request that failed, or whose deadline passed, keeps that). Returns once the
  // cancellation is in effect; NotFound when `id` is not in flight (it completed, or this engine
  // never issued it), Stopped after stop(). The receiver's imm count for a cancelled request is
  // whatever arrived before: release() the imm before reusing it.
  Status cancel(TransferId id);

  // --- progress on the caller's thread ------------------------------------------------------
  // Polls the domains on the calling thread for up to `max_events` events (WR completions, imms,
  // received messages) and runs their effects here — counters, flags, expectations, imm
  // observers; callbacks still run on the callback thread — instead of waiting for the worker to
  // see them: a thread that spins for an imm or a completion calls it in its loop and sees them
  // without a thread hop (latency-bound protocols: an imm ping-pong, a proxy). WRs of submitted
  // requests that waited for provider room (a paged write larger than its queue) are posted here
  // as the completions free it, within one pass's budget per domain. Returns how many
  // events it handled. Never blocks: 0 when a worker (or another caller) holds a group at the
  // moment — it then does that work itself — after stop(), and always with
  // post_on_caller_thread(false) or on shm (whose calls may never return once a peer dies: only
  // the worker makes them). The worker stays the progress engine: nothing needs this call. While
  // a thread calls it (its last call less than 200 us ago), the worker leaves the polling to that
  // thread and stands by, under either idle policy — it still accepts queued requests and runs
  // timers — and polls again once the calls stop: a thread that stops calling it gets its
  // completions from the worker at most ~200 us later.
  // On the same-host IPC backend a poll also runs host-memory copies (docs/gpu.md), here then.
  size_t progress(size_t max_events = 64);

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
  // With record_submit_latency(true) too: each request's posting time, from the submit call's
  // start to its last WR handed to the provider, in ns, taken on the posting thread's clock,
  // since the last call (then cleared). A request that failed before posting all its WRs has none.
  std::vector<uint32_t> take_posting_times_ns();
  // Health of every peer `group` has talked to.
  std::vector<PeerStatus> peer_status(size_t group = 0);

  // --- observability (fabric_lib/metrics.h, docs/operations.md) ---
  // A snapshot of every counter, gauge and histogram, read while the workers run (any thread,
  // also after stop()). Per-peer metrics and latency histograms need TransferEngineBuilder::metrics()
  // on (the default).
  Metrics metrics() const;
  // Where applications register their own metrics; they appear in metrics().app and on the
  // endpoint. Lives as long as the engine.
  MetricsRegistry& metrics_registry();
  // The address the Prometheus endpoint listens on ("127.0.0.1:9464"; the port the system chose
  // for port 0), or "" without one (TransferEngineBuilder::metrics_endpoint()).
  std::string metrics_endpoint() const;

 struct Impl;  // defined by the library

 private:
  friend class TransferEngineBuilder;
  explicit TransferEngine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace fabric_lib

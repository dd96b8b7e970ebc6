// One worker thread per DomainGroup (DESIGN.md section 4): it owns the group's domains, turns
// submitted requests into WRs, posts them with back-pressure, polls every completion queue,
// counts arriving imms, watches the health of every path to every peer, and hands completions
// to the callback thread.
#pragma once

#include <algorithm>
#include <atomic>
#include <deque>
#include <future>
#include <memory_resource>
#include <memory>
#include <optional>
#include <queue>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/deadline_queue.h"
#include "core/completion_dispatcher.h"
#include "core/idle_waiter.h"
#include "core/imm_count_table.h"
#include "core/message_buffers.h"
#include "core/peer_registry.h"
#include "core/request_pool.h"
#include "core/worker_inbox.h"
#include "core/worker_metrics.h"
#include "fabric_lib/health.h"
#include "fabric_lib/idle_policy.h"
#include "fabric_lib/stats.h"
#include "transport/domain_factory.h"
#include "transport/guard/provider_call_guard.h"

namespace fabric_lib::detail {

// Engine-wide counters that belong to no group (the rest are each group's WorkerMetrics; the
// requests submitted, EngineCore's submit stripes).
struct StatCounters {
  alignas(64) std::atomic<uint64_t> groups_abandoned{0};  // by the watchdog thread
};

struct GroupWorkerConfig {
  size_t group = 0;
  std::vector<transport::DomainSpec> domains;
  transport::DomainFactory open_domain;
  std::shared_ptr<RequestPool> requests;  // where finished requests go back
  std::optional<int> cpu;
  IdlePolicy idle_policy = IdlePolicy::kAdaptive;
  size_t max_inflight_per_domain = 0;  // 0 = provider's
  size_t max_message_bytes = 64 * 1024;
  int64_t stall_timeout_ns = 0;        // 0 = off
  int64_t peer_retry_ns = 0;
  int64_t probe_interval_ns = 0;       // 0 = no liveness probe
  uint32_t probe_misses = 3;
  HealthCallback on_health_event;
  bool post_on_caller = true;  // submitters may post on their own thread (own())
  bool trust_provider_calls = false;  // ... even on domains whose calls may hang (calls_may_hang_on_dead_peer)
  bool detailed_metrics = true;  // latency histograms and per-peer metrics (worker_metrics.h)
  bool record_submit_latency = false;  // take_submit_latencies()
};

class GroupWorker {
 public:
  GroupWorker(GroupWorkerConfig config, ImmCountTable& imms, CompletionDispatcher& dispatcher);
  ~GroupWorker();
  GroupWorker(const GroupWorker&) = delete;
  GroupWorker& operator=(const GroupWorker&) = delete;

  // Starts the thread, which pins itself and opens the domains; returns their outcome.
  Status start();
  // Asks the thread to cancel everything, close the domains and exit; joins it.
  void stop();

  // Takes ownership of an accepted request: posts it on the calling thread when the group is
  // uncontended (post_on_caller), else queues it for the worker.
  void submit(Request* request) {
    if (post_on_caller(request)) return;
    inbox_->push_request(request);
    if (abandoned()) fail_orphans();  // nobody else would ever take it
  }
  // TransferEngine::progress: when the group's progress ownership is free, polls its domains on
  // the calling thread for up to `max_events` events (completions, imms, receives) and runs their
  // effects here; returns how many it handled. 0 when the worker holds the group at the moment
  // (it does that work then), after stop, or when caller-thread operation is off.
  // `now`: a recent clock read (EngineCore::progress shares one among groups with nothing to do).
  size_t progress_on_caller(size_t max_events, int64_t now);
  // The thread that drove progress_on_caller stops (the callback thread parking): the worker
  // stops standing by and polls again from its next pass, woken if it naps.
  void caller_stopped_polling();
  // Runs `fn` on the worker thread and returns its Status (Stopped once the worker is gone, or
  // the reason it was given up on).
  Status run_sync(std::function<Status(GroupWorker&)> fn);

  // --- stuck provider calls (provider_watchdog.h) ---
  // Brackets every provider call of this worker's thread.
  transport::ProviderCallGuard& call_guard() { return *guard_; }
  // Watchdog thread, after call_guard().try_abandon() succeeded: the worker thread is frozen
  // inside a provider call for good. Fails every request it held and every one still queued with
  // `why`, answers its commands, and makes stop() leave the thread behind instead of joining it.
  void take_over_stuck(const Status& why);
  bool abandoned() const { return abandoned_.load(std::memory_order_seq_cst); }
  // Fails the requests still queued for an abandoned worker (any thread).
  void fail_orphans();

  const std::shared_ptr<WorkerInbox>& inbox() const { return inbox_; }
  size_t num_domains() const { return config_.domains.size(); }
  const std::vector<std::vector<uint8_t>>& addresses() const { return addresses_; }
  const std::vector<transport::DomainInfo>& infos() const { return infos_; }
  // Whether other threads may make this group's provider calls (post_on_caller,
  // progress_on_caller): as configured, unless a domain's calls may never return
  // (DomainInfo::calls_may_hang_on_dead_peer) and the builder did not trust them anyway
  // (trust_provider_calls). Fixed once start() succeeded.
  bool callers_may_post() const { return config_.post_on_caller; }
  // Adds this group's counters to `s` (any thread, once start() succeeded): its WorkerMetrics
  // and the domain stacks' DomainCounters.
  void add_stats(EngineStats& s) const;
  // This group's metrics (any thread; they live as long as the worker).
  const WorkerMetrics& metrics() const { return metrics_; }
  // Rotating first domain for round-robin routes. A load and a store, not a read-modify-write:
  // submitters racing here may start on the same domain (the load evens out a little less), and
  // every submit saves a locked instruction (~10 ns on the 2-core VM).
  uint32_t next_start_domain() {
    const uint32_t d = next_start_.load(std::memory_order_relaxed);
    next_start_.store(d + 1, std::memory_order_relaxed);
    return d;
  }

  // --- worker thread only (inside run_sync) ---
  transport::Domain& domain(size_t d) { return *domains_[d].domain; }
  PeerEntry& peer_for(const MrDesc& desc) { return peers_.for_desc(desc, raw_domains_); }
  // Inserts every path of `peer` into its domain now (peer groups resolve ahead of time).
  Status resolve_all_paths(PeerEntry& peer);
  void forget_peer(const MrDesc& desc);
  Status add_recv_pool(std::shared_ptr<RecvPool> pool);
  // Cancels request `id` (TransferEngine::cancel): its unposted WRs are dropped, its posted ones
  // awaited, then it completes with Cancelled (or the error it had already met). NotFound when it
  // is not in flight.
  Status cancel(uint64_t id);
  std::vector<PeerStatus> peer_status();
  // Submit-call-to-first-WR-posted latencies recorded so far (ns); clears them.
  std::vector<uint32_t> take_submit_latencies() { return take_record(submit_latencies_); }
  // Submit-call-to-last-WR-posted times (a request's whole posting, on the posting thread's
  // clock) recorded so far (ns); clears them.
  std::vector<uint32_t> take_posting_times() { return take_record(posting_times_); }

 private:
  // --- progress ownership --------------------------------------------------------------------
  // One thread at a time drives the group's domains and its request state (the providers'
  // threading model: one thread per domain at a time): the worker, for one pass of its loop, or a
  // submitter that won ownership with nothing queued ahead of it. The worker stays the progress
  // engine for everything queued, retried and timed. own(), post_on_caller() and
  // progress_on_caller() live in group_worker_caller.cc.
  bool try_own() { return !owner_.exchange(true, std::memory_order_acquire); }
  void disown() { owner_.store(false, std::memory_order_release); }
  // Worker: takes ownership, waiting while a submitter holds it (and, bounded, while one is
  // trying to take it); false when the group was given up on meanwhile (the watchdog took its
  // work over: the worker thread then just ends).
  bool own();
  // Submitter: posts `request`'s WRs (up to the per-pass bound) on this thread if ownership is
  // free (spins briefly for it); false: queue it instead.
  bool post_on_caller(Request* request);
  // An application thread called progress_on_caller within the adaptive spin budget.
  bool caller_polls(int64_t now) const {
    return now - caller_progress_ns_.load(std::memory_order_relaxed) < IdleWaiter::kSpinBudget.count() * 1000;
  }

  struct Stream {
    Request* request;
    uint32_t next;
    uint32_t end;
  };
  struct DomainState {
    explicit DomainState(std::pmr::memory_resource* pool) : streams(pool) {}
    std::unique_ptr<transport::Domain> domain;
    std::pmr::deque<Stream> streams;  // its blocks come back to the worker's pool_, not the heap
    size_t inflight = 0;       // WRs the provider holds, abandoned ones included
    size_t max_inflight = 0;
    // One peer may hold at most this many: a dead peer whose WRs never complete (shm keeps
    // them forever) must not take the whole endpoint with it.
    size_t max_inflight_per_path = 0;
    size_t wrs_per_pass = 64;  // DomainInfo::wrs_per_pass
    size_t batch_wrs = 64;     // post_batch's next batch at most (kMinBatchWrs after a partial one)
  };
  // A request's deadline: still its own when the request is live with the same id.
  struct DeadlineEntry {
    Request* request;
    uint64_t id;
  };

  // group_worker.cc: the loop, accepting, polling, finishing.
  void thread_main(std::promise<Status>* opened);
  Status open_domains();
  bool accept_requests(int64_t now);
  // Mid-pass, between two domains' polls: accepts the requests queued since the pass began and
  // posts what every domain takes (`now`: a fresh clock read).
  bool accept_and_post(int64_t now);
  void accept(Request* r, int64_t now);
  void link_live(Request* r);
  void unlink_live(Request* r);
  // Calls fn(r) for every live request; fn may unlink r.
  template <typename Fn>
  void for_each_live(Fn&& fn) {
    for (Request* r = live_head_; r != nullptr;) {
      Request* next = r->live_next;
      fn(r);
      r = next;
    }
  }
  // group_worker_post.cc: posting.
  bool post_pending(size_t d);
  // The bookkeeping of `wrs` WRs just posted to `peer` on domain `e` under `record`.
  void note_posted(WrRecord* record, PeerEntry& peer, size_t e, uint32_t wrs);
  // note_posted's two halves: the record, path, domain and peer counts; the domain's and op's
  // metrics (once per batch of a request's WRs).
  void note_posted_on_path(WrRecord* record, PeerEntry& peer, size_t e, uint32_t wrs);
  void count_posted(size_t e, uint8_t op, uint32_t wrs);
  // A record for WRs of `r` to `peer` on domain `e`, posted now (its bytes and count are the caller's).
  WrRecord* new_record(Request& r, PeerEntry& peer, size_t e);
  transport::PostResult post_one(size_t d, Stream& stream, Status* error);
  // Posts up to `max_wrs` WRs of `stream` as one run when the next ones go to one peer on this
  // domain's own path and have one length (a paged write's pages): one record and one
  // Domain::post_writes call for all of them. Returns how many it posted; 0 with `*result`
  // kPosted when the run form does not apply (the caller then uses post_one); else `*result`
  // and `*error` are post_one's for the first WR not posted.
  size_t post_run(size_t d, Stream& stream, size_t max_wrs, transport::PostResult* result, Status* error);
  // Where post_run does not apply (a scatter: the next WRs go to other targets or have other
  // lengths) and the request's first WR is out, posts up to `max_wrs` of the next WRs that go on this domain's own paths in one
  // Domain::post_writes call, each with its own record: one watchdog bracket and one virtual
  // call for the batch instead of one per WR. The same contract as post_run: 0 with `*result`
  // kPosted when fewer than two WRs qualify (the caller then uses post_one). A batch the provider
  // took only part of makes the domain's next one small (DomainState::batch_wrs).
  size_t post_batch(size_t d, Stream& stream, size_t max_wrs, transport::PostResult* result, Status* error);
  static constexpr size_t kMinBatchWrs = 4, kMaxBatchWrs = 64;
  // group_worker.cc again.
  // Returns how many events it handled. `clock_fresh`: clock_ns_ was read just before the call,
  // so it stands for the events' completion time (no second read).
  size_t poll_domain(size_t d, size_t max_events = SIZE_MAX, bool clock_fresh = false);
  void on_wr_done(WrRecord* record, transport::Event& ev);
  void maybe_finish(Request* r);
  // `on_owner` false: called by a thread without progress ownership (an abandoned group's).
  void deliver(Request* r, const Status& status, bool on_owner = true);
  // Its first WR was posted: the submit-to-post latency (benchmarks, metrics).
  void note_first_post(const Request& r);
  // The request's last WR was handed to the provider (record_submit_latency: its posting time).
  void note_all_posted(const Request& r);
  // The metrics of `wrs` WRs of `bytes` each that ended: `ok`, or failed with `code` (abandoned
  // by their path too).
  void count_wr_end(uint8_t op, const PeerEntry& peer, size_t e, ErrorCode code, uint64_t bytes, int64_t posted_ns,
                    uint32_t wrs = 1);
  // Mirrors a peer's health into its metrics (after every change).
  void note_health(const PeerEntry& peer);
  void shutdown();
  void drain_before_close();

  // group_worker_health.cc: deadlines, path and peer failure, stall detection, status.
  bool expire_deadlines(int64_t now);
  bool sweep_stalls(int64_t now);
  void path_failed(PeerEntry& peer, size_t d, const Status& why);
  void peer_unreachable(PeerEntry& peer, const Status& why);
  void path_recovered(PeerEntry& peer, size_t d);
  // Returns the domain to carry a WR planned for `d` to `peer` (d itself while its path is up).
  std::optional<size_t> route_around(const PeerEntry& peer, size_t d) const;
  // Before a request uses `peer`: after the retry interval, an unreachable peer is tried afresh.
  void maybe_retry_peer(PeerEntry& peer, int64_t now);
  void report(const PeerEntry& peer, int domain, bool up, const Status& reason);
  int64_t next_timer_ns(int64_t now) const;

  // group_worker_probe.cc: control buffers, the liveness probe, answering peers' pings.
  Status open_control();
  bool probe_sweep(int64_t now);
  void on_control_recv(size_t d, uint64_t context, const transport::Event& ev);
  void on_control_send_done(size_t d, uint64_t context);
  bool send_probe(size_t d, PeerEntry& peer, const struct ProbeMessage& message);

  // group_worker_messages.cc: two-sided messages.
  transport::PostResult post_send(Request& r, WrRecord* record, transport::PeerHandle peer, Status* error);
  bool post_recvs_pending();
  void on_recv(RecvSlot* slot, const transport::Event& ev);
  void repost(RecvSlot* slot) { recvs_to_post_.push_back(slot); }

  GroupWorkerConfig config_;
  ImmCountTable& imms_;
  CompletionDispatcher& dispatcher_;
  std::shared_ptr<WorkerInbox> inbox_;
  std::thread thread_;
  std::promise<void> exited_;  // set as the thread ends
  std::future<void> exited_future_ = exited_.get_future();
  std::atomic<bool> stop_requested_{false};
  std::shared_ptr<transport::ProviderCallGuard> guard_ = std::make_shared<transport::ProviderCallGuard>();
  std::atomic<bool> abandoned_{false};
  std::atomic<bool> owner_{false};  // progress ownership (see own())
  // Submitters retrying in post_on_caller after a first, unannounced try failed: the worker's
  // own() lets them go first.
  std::atomic<uint32_t> callers_trying_{0};
  std::atomic<int64_t> caller_progress_ns_{INT64_MIN / 2};  // last progress_on_caller (monotonic ns)
  Status abandon_reason_;  // written before abandoned_ is set
  std::atomic<uint32_t> next_start_{0};

  // Block memory of the worker's containers that grow and shrink per request (each domain's
  // streams): recycled here, so a steady flow of requests allocates nothing.
  std::pmr::unsynchronized_pool_resource pool_;
  std::vector<DomainState> domains_;
  // Whether a pass takes requests that arrived during one domain's poll before polling the next
  // (DomainInfo::posts_issued_by_poll says when not).
  bool accept_between_polls_ = true;
  std::vector<transport::Domain*> raw_domains_;
  std::vector<std::vector<uint8_t>> addresses_;
  std::vector<transport::DomainInfo> infos_;
  WorkerMetrics metrics_;
  // The progress owner's latest clock read — the worker's at the start of its pass and after a
  // poll that returned events; a submitter's in post_on_caller; progress()'s before its polls —
  // the time of what it posts and handles now. Progress owner only.
  int64_t clock_ns_ = 0;
  std::vector<std::shared_ptr<const transport::DomainCounters>> domain_counters_;  // set by open_domains()
  PeerRegistry peers_;
  WrRecordPool records_;
  std::vector<transport::WriteWr> run_wrs_;  // post_run's and post_batch's WRs (kept: no allocation per run)
  std::vector<WrRecord*> batch_records_;      // post_batch's records, one per WR of run_wrs_
  // The requests this worker accepted and has not given back, linked through
  // Request::live_prev/live_next (shutdown and take-over walk it); cancel() and deadlines find a
  // request by its id's slot instead (RequestPool).
  Request* live_head_ = nullptr;
  DeadlineQueue<DeadlineEntry> deadlines_;
  int64_t next_sweep_ns_ = 0;
  SendSlots send_slots_;
  std::vector<std::shared_ptr<RecvPool>> recv_pools_;
  std::vector<RecvSlot*> recvs_to_post_;
  std::vector<transport::Event> events_;
  static constexpr size_t kLatencyReserve = 1 << 16;
  std::vector<uint32_t> submit_latencies_;
  std::vector<uint32_t> posting_times_;
  // (A record keeps its capacity: a sample pushed inside the measured interval must not pay for
  // the vector's growth.)
  static std::vector<uint32_t> take_record(std::vector<uint32_t>& record) {
    std::vector<uint32_t> out = std::exchange(record, {});
    record.reserve(std::max<size_t>(out.capacity(), kLatencyReserve));
    return out;
  }
  // Liveness probe: per-domain control buffers (receive slots, then send slots).
  struct ControlBuffers {
    BufferBlock block;
    std::vector<uint32_t> free_sends;
    std::vector<PeerEntry*> slot_peer;  // the peer each busy send slot was sent to
  };
  std::vector<ControlBuffers> control_;
  uint64_t next_probe_seq_ = 1;
  int64_t next_probe_ns_ = 0;
};

}  // namespace fabric_lib::detail

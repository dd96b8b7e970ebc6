// The TransferEngine's implementation: validation of every call, submission to the group
// workers, registration, and the stop protocol.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "base/clock.h"
#include "core/completion_dispatcher.h"
#include "core/engine_options.h"
#include "core/group_worker.h"
#include "core/imm_count_table.h"
#include "core/mr_registry.h"
#include "core/peer_group_data.h"
#include "core/prepared_data.h"
#include "core/provider_watchdog.h"
#include "core/request_pool.h"
#include "core/submit_gate.h"
#include "fabric_lib/health.h"
#include "fabric_lib/metrics.h"
#include "fabric_lib/peer_group.h"
#include "fabric_lib/requests.h"
#include "fabric_lib/stats.h"
#include "fabric_lib/uvm_watcher.h"

namespace fabric_lib::detail {

class UvmWatcherHub;

class EngineCore {
 public:
  explicit EngineCore(EngineOptions options);
  ~EngineCore();

  // Opens every group's domains (options.groups, through options.open_domain); the engine is
  // usable only after this succeeds.
  Status start();

  DomainAddress main_address() const;
  std::vector<DomainAddress> domain_addresses(size_t group) const;
  size_t num_groups() const { return workers_.size(); }
  size_t num_domains() const { return domains_per_group_; }
  std::string provider() const;

  Result<MrRegistration> register_memory(void* ptr, size_t length, Access access, MemoryKind kind, size_t group);
  Status unregister_memory(MrHandle handle);

  Result<TransferId> submit_send(const DomainAddress& dst, std::span<const uint8_t> message, Completion done);
  Status post_recvs(size_t count, size_t max_length, RecvCallback on_recv, RecvErrorCallback on_error);
  Result<TransferId> submit_send(const DomainAddress& dst, MrHandle src, uint64_t offset, uint64_t length,
                                 Completion done);
  Status post_recvs_into(MrHandle region, uint64_t offset, size_t slot_bytes, size_t count, RecvCallback on_recv,
                         RecvErrorCallback on_error);
  Result<TransferId> submit_imm(uint32_t imm, const MrDesc& dst, Completion done, size_t group);
  Result<TransferId> submit_write(WriteRequest&& request, Completion&& done);
  // By const reference the request's lists are copied into the recycled request; by rvalue taken.
  Result<TransferId> submit_paged_writes(const PagedWriteRequest& request, Completion done);
  Result<TransferId> submit_paged_writes(PagedWriteRequest&& request, Completion done);
  // `group`: the resolved destinations of request.group, when it names one.
  // Its descriptors are copied (once per distinct descriptor) into the recycled request.
  Result<TransferId> submit_scatter(const ScatterRequest& request, std::shared_ptr<const PeerGroup::Data> group,
                                    Completion done);
  Result<TransferId> submit_barrier(uint32_t imm, std::span<const MrDesc> peers, Completion done, size_t group);
  Result<std::shared_ptr<const PeerGroup::Data>> add_peer_group(std::span<const MrDesc> peers, size_t group);
  Status forget_peer(const MrDesc& desc, size_t group);
  // Prepared requests (fabric_lib/prepared.h; engine_core_prepared.cc).
  Result<std::shared_ptr<const PreparedPagedWrites::Data>> prepare_paged_writes(const PagedWriteTemplate& t);
  Result<TransferId> submit_prepared(const PreparedPagedWrites::Data& p, std::span<const uint32_t> src_pages,
                                     std::span<const uint32_t> dst_pages, std::optional<uint32_t> imm, Completion done);
  Result<std::shared_ptr<const PreparedScatter::Data>> prepare_scatter(const ScatterTemplate& t,
                                                                       std::shared_ptr<const PeerGroup::Data> peers);
  Result<TransferId> submit_prepared(const PreparedScatter::Data& p, std::span<const ScatterSlice> slices,
                                     std::optional<uint32_t> imm, Completion done);

  // Cancels an accepted request (GroupWorker::cancel); NotFound when it is no longer in flight.
  Status cancel(TransferId id);
  // TransferEngine::progress: every group's GroupWorker::progress_on_caller.
  size_t progress(size_t max_events);

  ImmCountTable& imms() { return *imms_; }
  Result<std::unique_ptr<UvmWatcher::State>> alloc_uvm_watcher(WatchCallback callback);
  Status stop();
  bool stopped() const { return stopped_.load(std::memory_order_acquire); }
  bool on_callback_thread() const { return dispatcher_ && dispatcher_->on_callback_thread(); }
  // engine_core_metrics.cc: the counters, read while the workers run.
  EngineStats stats() const;
  Metrics metrics() const;
  MetricsRegistry& metrics_registry() { return app_metrics_; }
  std::vector<uint32_t> take_submit_latencies_ns();
  std::vector<uint32_t> take_posting_times_ns();
  std::vector<PeerStatus> peer_status(size_t group);

 private:
  // The two forms of submit_paged_writes: `CallerRequest` is the caller's request, const (its
  // page lists copied) or not (taken).
  template <class CallerRequest>
  Result<TransferId> submit_paged_writes_of(CallerRequest&& request, Completion done);
  // Every worker's record (GroupWorker::take_submit_latencies or take_posting_times), taken on
  // the worker.
  std::vector<uint32_t> take_latencies_ns(std::vector<uint32_t> (GroupWorker::*take)());
  // One submit call (SubmitGate::Scope): holds off stop() while it is between its "accepting?"
  // check and its hand-over. Also notes when the API call began (metrics' latencies, the
  // submit-to-first-post measurement).
  class SubmitScope {
   public:
    SubmitScope(EngineCore& e, OpType op) : gate_(e.gate_, op), start_ns_(e.timed_submits_ ? monotonic_ns() : 0) {}
    bool accepting() const { return gate_.open(); }
    int64_t start_ns() const { return start_ns_; }
    OpType op() const { return gate_.op(); }
    void count_submitted() const { gate_.count_submitted(); }

   private:
    SubmitGate::Scope gate_;
    int64_t start_ns_;
  };

  Result<std::shared_ptr<MrEntry>> local_region(MrHandle handle, uint64_t offset, uint64_t length) const;
  Result<std::shared_ptr<MrEntry>> message_region(MrHandle handle, uint64_t offset, uint64_t length,
                                                  const char* what) const;
  Status check_remote(const MrDesc& desc, uint64_t offset, uint64_t length, size_t group) const;
  Status check_route(const Route& route) const;
  // Where a request planned with `route` goes: how a contiguous write's shards are placed, and
  // the domain its first shard (page run, scatter target) starts on. On domains that share one
  // medium (DomainInfo::one_medium) the default RoundRobin keeps each write's shards on one
  // domain (same shards, same imm count; one op there instead of one per domain), and that domain
  // is domain 0 for every request unless options_.one_medium_spread rotates it. Any other route
  // rotates the shards, from the group's rotating start domain. Where those domains also take a
  // WR's imm count (DomainInfo::takes_imm_count), a single write's shards go as one WR
  // (planner::plan_write_as_one): one WR to plan, build and count instead of one per shard.
  struct RequestPlacement {
    planner::Placement placement;
    uint32_t start;
    bool write_as_one_wr = false;
  };
  RequestPlacement place(const Route& route, size_t group);
  // The route a paged write's pages are planned with: where `placement` keeps shards on one
  // domain, RoundRobin{1} (a paged write's imm count does not depend on the route).
  static Route paged_route(const Route& route, planner::Placement placement);
  Status check_page_geometry(uint64_t page_length, uint64_t src_stride, uint64_t dst_stride, bool several_pages,
                             const char* what) const;
  // Resolves every path of `descs` on `group`'s worker (add_peer_group, prepared requests).
  Result<std::shared_ptr<const PeerGroup::Data>> resolve_peers(std::span<const MrDesc> descs, size_t group);
  Status check_group(size_t group) const;
  // A recycled request with what every write form sets: its completion, source region and imm
  // (none: no imm). Null when too many requests are in flight (RequestPool::too_many_requests).
  RequestPool::Ptr take_request(Completion&& done, std::shared_ptr<MrEntry> src, std::optional<uint32_t> imm);
  // Plans are grouped by domain, the request is counted and handed to its group's worker.
  TransferId enqueue(size_t group, RequestPool::Ptr request, const SubmitScope& scope);
  // Refuses new work, stops every worker (cancelling what they hold) and imm expectations.
  void shutdown_workers();

  EngineOptions options_;
  std::shared_ptr<RequestPool> requests_ = std::make_shared<RequestPool>();  // before the workers that return to it
  std::unique_ptr<CompletionDispatcher> dispatcher_;
  std::unique_ptr<ImmCountTable> imms_;
  MrRegistry registry_;
  StatCounters stats_;
  MetricsRegistry app_metrics_;
  // A worker given up on is never deleted: its stuck thread may still be inside its domains.
  struct DeleteUnlessAbandoned {
    void operator()(GroupWorker* w) const {
      if (!w->abandoned()) delete w;
    }
  };
  std::vector<std::unique_ptr<GroupWorker, DeleteUnlessAbandoned>> workers_;
  std::unique_ptr<ProviderWatchdog> watchdog_;  // with a stall timeout only
  // The UVM watcher thread's owner, made with the first watcher (gpu/uvm_watcher_hub.h).
  std::mutex watcher_mu_;
  std::shared_ptr<detail::UvmWatcherHub> watchers_;

  SubmitGate gate_;  // accepting submits, and the submit calls stop() waits out
  const bool timed_submits_;  // metrics on, or submit latency recorded: submits read the clock
  const size_t domains_per_group_;  // options_.domains_per_group(), read by every submit
  std::atomic<bool> stopped_{false};
  std::mutex stop_mu_;
};

}  // namespace fabric_lib::detail

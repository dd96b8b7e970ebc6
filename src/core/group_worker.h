// One worker thread per DomainGroup (DESIGN.md section 4): it owns the group's domains, turns
// submitted requests into WRs, posts them with back-pressure, polls every completion queue,
// counts arriving imms and hands completions to the callback thread.
#pragma once

#include <atomic>
#include <deque>
#include <future>
#include <memory>
#include <optional>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/completion_dispatcher.h"
#include "core/message_buffers.h"
#include "core/peer_table.h"
#include "core/worker_inbox.h"
#include "fabric_lib/imm_counter.h"
#include "fabric_lib/transfer_engine.h"
#include "transport/domain_factory.h"

namespace fabric_lib::detail {

// Engine-wide activity counters, bumped by workers and submitters.
struct StatCounters {
  std::atomic<uint64_t> requests_submitted{0};
  std::atomic<uint64_t> requests_completed{0};
  std::atomic<uint64_t> requests_failed{0};
  std::atomic<uint64_t> wrs_posted{0};
  std::atomic<uint64_t> imms_received{0};
  std::atomic<uint64_t> messages_received{0};
};

struct GroupWorkerConfig {
  size_t group = 0;
  std::vector<transport::DomainSpec> domains;
  std::optional<int> cpu;
  IdlePolicy idle_policy = IdlePolicy::kAdaptive;
  size_t max_inflight_per_domain = 0;  // 0 = provider's
  size_t max_message_bytes = 64 * 1024;
};

class GroupWorker {
 public:
  GroupWorker(GroupWorkerConfig config, ImmCounter& imms, CompletionDispatcher& dispatcher, StatCounters& stats);
  ~GroupWorker();
  GroupWorker(const GroupWorker&) = delete;
  GroupWorker& operator=(const GroupWorker&) = delete;

  // Starts the thread, which pins itself and opens the domains; returns their outcome.
  Status start();
  // Asks the thread to cancel everything, close the domains and exit; joins it.
  void stop();

  // Takes ownership of an accepted request.
  void submit(Request* request) { inbox_->push_request(request); }
  // Runs `fn` on the worker thread and returns its Status (Stopped once the worker is gone).
  Status run_sync(std::function<Status(GroupWorker&)> fn);
  // Runs `fn` on the worker thread later (or never, once the worker is gone).
  void run_async(std::function<void(GroupWorker&)> fn);

  const std::shared_ptr<WorkerInbox>& inbox() const { return inbox_; }
  size_t num_domains() const { return config_.domains.size(); }
  const std::vector<std::vector<uint8_t>>& addresses() const { return addresses_; }
  const std::vector<transport::DomainInfo>& infos() const { return infos_; }
  // Rotating first domain for round-robin routes.
  uint32_t next_start_domain() { return next_start_.fetch_add(1, std::memory_order_relaxed); }

  // --- worker thread only (inside run_sync / run_async) ---
  transport::Domain& domain(size_t d) { return *domains_[d].domain; }
  Result<transport::PeerHandle> resolve_peer(size_t d, std::span<const uint8_t> address);
  void forget_peer(size_t d, std::span<const uint8_t> address);
  Status add_recv_pool(std::shared_ptr<RecvPool> pool);
  // Submit-call-to-first-WR-posted latencies recorded so far (ns); clears them.
  std::vector<uint32_t> take_submit_latencies() { return std::exchange(submit_latencies_, {}); }

 private:
  struct Stream {
    Request* request;
    uint32_t next;
    uint32_t end;
    uint32_t cached_target = UINT32_MAX;
    transport::PeerHandle cached_peer = 0;
  };
  struct DomainState {
    std::unique_ptr<transport::Domain> domain;
    std::deque<Stream> streams;
    size_t inflight = 0;
    size_t max_inflight = 0;
    PeerTable peers;
  };

  void thread_main(std::promise<Status>* opened);
  Status open_domains();
  bool accept_requests();
  bool post_pending(size_t d);
  bool post_recvs_pending();
  bool poll_domain(size_t d);
  transport::PostResult post_one(size_t d, Stream& stream, Status* error);
  transport::PostResult post_send(Request& r, Status* error);
  void on_recv(RecvSlot* slot, const transport::Event& ev);
  void repost(RecvSlot* slot);
  void maybe_finish(Request* r);
  void deliver(Request* r, const Status& status);
  void shutdown();

  GroupWorkerConfig config_;
  ImmCounter& imms_;
  CompletionDispatcher& dispatcher_;
  StatCounters& stats_;
  std::shared_ptr<WorkerInbox> inbox_;
  std::thread thread_;
  std::atomic<bool> stop_requested_{false};
  std::atomic<uint32_t> next_start_{0};

  std::vector<DomainState> domains_;
  std::vector<std::vector<uint8_t>> addresses_;
  std::vector<transport::DomainInfo> infos_;
  std::unordered_set<Request*> live_;
  SendSlots send_slots_;
  std::vector<std::shared_ptr<RecvPool>> recv_pools_;
  std::vector<RecvSlot*> recvs_to_post_;
  std::vector<transport::Event> events_;
  std::vector<uint32_t> submit_latencies_;
};

}  // namespace fabric_lib::detail

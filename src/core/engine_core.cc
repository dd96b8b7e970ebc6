// EngineCore: start and stop, addresses, memory registration, cancel, progress() on the
// application's thread, peers and UVM watchers. The request forms are in engine_core_submit.cc,
// prepared requests in engine_core_prepared.cc, messages in engine_core_messages.cc, metrics in
// engine_core_metrics.cc.
#include "core/engine_core.h"

#include <algorithm>
#include <thread>

#include "base/log.h"
#include "core/range_checks.h"
#include "core/uvm_watcher_hub.h"
#include "core/uvm_watcher_state.h"
#include "gpu/memory_kind.h"

namespace fabric_lib::detail {

EngineCore::EngineCore(EngineOptions options)
    : options_(std::move(options)), timed_submits_(options_.metrics || options_.record_submit_latency),
      domains_per_group_(options_.domains_per_group()) {
  dispatcher_ = std::make_unique<CompletionDispatcher>();
  imms_ = std::make_unique<ImmCountTable>(options_.imm_table_capacity, dispatcher_.get());
}

EngineCore::~EngineCore() {
  if (dispatcher_->on_callback_thread()) {
    // The callback thread cannot join itself: stop everything else and leave it (and the
    // dispatcher it runs) alive until the process ends.
    FL_LOG_ERROR("TransferEngine destroyed from its own callback thread; leaking the callback thread");
    dispatcher_->clear_reaper();  // its reaper calls into this engine once the callback returns
    shutdown_workers();
    (void)dispatcher_.release();
    return;
  }
  bool on_watcher_thread = false;
  {
    std::lock_guard lock(watcher_mu_);
    on_watcher_thread = watchers_ && watchers_->on_hub_thread();
  }
  if (on_watcher_thread) {  // stop() refuses there; the watcher thread is detached instead of joined
    FL_LOG_ERROR("TransferEngine destroyed from a UVM watcher callback");
    shutdown_workers();
    dispatcher_->shutdown();
    return;
  }
  stop();
}

Status EngineCore::start() {
  if (options_.groups.empty() || options_.domains_per_group() == 0) return invalid_argument("no domains to open");
  if (options_.groups.size() > (size_t{1} << RequestPool::kGroupBits)) {
    return invalid_argument("at most " + std::to_string(size_t{1} << RequestPool::kGroupBits) + " groups (TransferIds name the group in " +
                            std::to_string(RequestPool::kGroupBits) + " bits)");
  }
  if (!options_.open_domain) return invalid_argument("no domain factory");
  for (size_t g = 0; g < options_.groups.size(); ++g) {
    GroupWorkerConfig config;
    config.group = g;
    config.domains = options_.groups[g];
    config.open_domain = options_.open_domain;
    config.requests = requests_;
    auto cpu = options_.worker_cpus.find(g);
    if (cpu != options_.worker_cpus.end()) config.cpu = cpu->second;
    config.idle_policy = options_.idle_policy;
    config.max_inflight_per_domain = options_.max_inflight_per_domain;
    config.max_message_bytes = options_.max_message_bytes;
    config.stall_timeout_ns = options_.stall_timeout.count();
    config.peer_retry_ns = options_.peer_retry_interval.count();
    config.probe_interval_ns = options_.probe_interval.count();
    config.probe_misses = options_.probe_misses;
    config.on_health_event = options_.on_health_event;
    config.post_on_caller = options_.post_on_caller;
    config.trust_provider_calls = options_.trust_provider_calls;
    config.detailed_metrics = options_.metrics;
    config.record_submit_latency = options_.record_submit_latency;
    std::unique_ptr<GroupWorker, DeleteUnlessAbandoned> worker(
        new GroupWorker(std::move(config), *imms_, *dispatcher_));
    FABRIC_LIB_RETURN_IF_ERROR(worker->start());
    workers_.push_back(std::move(worker));
  }
  if (options_.stall_timeout.count() > 0) {
    std::vector<GroupWorker*> watched;
    for (auto& w : workers_) watched.push_back(w.get());
    watchdog_ = std::make_unique<ProviderWatchdog>(std::move(watched), options_.stall_timeout.count(), stats_,
                                                   [this](uintptr_t stuck) { dispatcher_->replace_if_stuck(stuck); });
  }
  for (size_t g = 1; g < workers_.size(); ++g) {
    if (workers_[g]->infos()[0].transport != workers_[0]->infos()[0].transport) {
      return invalid_argument("all groups must use the same transport");
    }
  }
  gate_.open();
  // Adaptive engines: the callback thread reaps while callbacks flow (CompletionDispatcher::
  // set_reaper). A spinning worker already reaps at once, and would only contend with it.
  const bool callers_post =
      std::any_of(workers_.begin(), workers_.end(), [](const auto& w) { return w->callers_may_post(); });
  if (options_.idle_policy == IdlePolicy::kAdaptive && callers_post) {
    dispatcher_->set_reaper([this] { return progress(64); },
                            [this] {
                              for (auto& w : workers_) w->caller_stopped_polling();
                            });
  }
  return ok_status();
}

DomainAddress EngineCore::main_address() const {
  Result<DomainAddress> a = DomainAddress::from_bytes(workers_[0]->addresses()[0]);
  return a.ok() ? *a : DomainAddress();
}

std::vector<DomainAddress> EngineCore::domain_addresses(size_t group) const {
  std::vector<DomainAddress> out;
  if (group >= workers_.size()) return out;
  for (const auto& bytes : workers_[group]->addresses()) {
    Result<DomainAddress> a = DomainAddress::from_bytes(bytes);
    if (a.ok()) out.push_back(*a);
  }
  return out;
}

std::string EngineCore::provider() const { return workers_[0]->infos()[0].provider; }

Status EngineCore::check_group(size_t group) const {
  if (group >= workers_.size()) {
    return invalid_argument("group " + std::to_string(group) + " does not exist (engine has " +
                            std::to_string(workers_.size()) + ")");
  }
  return ok_status();
}

// --- memory -----------------------------------------------------------------------------------

Result<MrRegistration> EngineCore::register_memory(void* ptr, size_t length, Access access, MemoryKind kind,
                                                   size_t group) {
  if (!gate_.accepting()) return fabric_lib::stopped("engine stopped");
  if (ptr == nullptr) return invalid_argument("register_memory: null pointer");
  if (length == 0) return invalid_argument("register_memory: zero length");
  FABRIC_LIB_RETURN_IF_ERROR(check_group(group));
  Result<MemoryKind> resolved = gpu::resolve_memory_kind(ptr, length, kind);  // kAuto detected, kCuda checked
  if (!resolved.ok()) return resolved.status();
  kind = *resolved;
  GroupWorker& worker = *workers_[group];

  auto entry = std::make_unique<MrEntry>();
  entry->id = registry_.next_id();
  entry->group = group;
  entry->ptr = static_cast<uint8_t*>(ptr);
  entry->length = length;
  entry->access = access;
  entry->kind = kind;
  Status status = worker.run_sync([&](GroupWorker& w) {
    for (size_t d = 0; d < w.num_domains(); ++d) {
      Result<transport::DomainMr> mr = w.domain(d).register_memory(ptr, length, access, kind);
      if (!mr.ok()) {
        for (size_t k = 0; k < entry->domain_mrs.size(); ++k) w.domain(k).unregister_memory(entry->domain_mrs[k].id);
        entry->domain_mrs.clear();
        return Status(mr.status().code(), "domain " + std::to_string(d) + ": " + mr.status().message());
      }
      entry->domain_mrs.push_back(*mr);
    }
    return ok_status();
  });
  if (!status.ok()) return status;

  std::vector<MrDomainEntry> domains;
  for (size_t d = 0; d < entry->domain_mrs.size(); ++d) {
    const transport::DomainMr& mr = entry->domain_mrs[d];
    MrDomainEntry e;
    Result<DomainAddress> address = DomainAddress::from_bytes(worker.addresses()[d]);
    if (!address.ok()) return address.status();
    e.address = *address;
    e.rkey = mr.rkey;
    e.addr_base = mr.addr_base;
    e.transport_blob = mr.transport_blob;
    domains.push_back(std::move(e));
  }
  Result<MrDesc> desc = MrDesc::create(worker.infos()[0].transport, kind, reinterpret_cast<uint64_t>(ptr), length,
                                       access, std::move(domains));
  if (!desc.ok()) return desc.status();
  entry->desc = *desc;

  // The provider registrations close on the worker once the last user (registry or request) lets go.
  std::vector<uint64_t> ids;
  for (const auto& mr : entry->domain_mrs) ids.push_back(mr.id);
  std::shared_ptr<MrEntry> shared(entry.release(), [&worker, inbox = worker.inbox(), ids](MrEntry* e) {
    delete e;
    inbox->post([&worker, ids](bool alive) {
      if (!alive) return;
      for (size_t d = 0; d < ids.size(); ++d) worker.domain(d).unregister_memory(ids[d]);
    });
  });
  MrRegistration reg{MrHandle{shared->id}, shared->desc};
  registry_.insert(std::move(shared));
  return reg;
}

Status EngineCore::unregister_memory(MrHandle handle) {
  if (!handle.valid()) return invalid_argument("unregister_memory: empty handle");
  std::shared_ptr<MrEntry> entry = registry_.remove(handle);
  if (!entry) return not_found("memory region " + std::to_string(handle.id) + " is not registered");
  return ok_status();  // remove() marked it unregistered: prepared requests and lookups refuse it
}

Result<std::shared_ptr<MrEntry>> EngineCore::local_region(MrHandle handle, uint64_t offset, uint64_t length) const {
  std::shared_ptr<MrEntry> entry = registry_.find(handle);
  if (!entry) return not_found("source memory region " + std::to_string(handle.id) + " is not registered");
  if (!fits(offset, length, entry->length)) {
    return out_of_range("source range " + range_text(offset, length, entry->length));
  }
  return entry;
}

Status EngineCore::cancel(TransferId id) {
  if (!gate_.accepting()) return fabric_lib::stopped("engine stopped");
  const size_t group = RequestPool::split(id).group;
  if (group >= workers_.size() || !requests_->issued(id)) {
    return not_found("transfer id " + std::to_string(id) + " was never issued by this engine");
  }
  return workers_[group]->run_sync([id](GroupWorker& w) { return w.cancel(id); });
}

size_t EngineCore::progress(size_t max_events) {
  if (!gate_.accepting()) return 0;
  size_t handled = 0;
  // One clock read serves the groups that had nothing to do (each read its own before: 25-35 ns
  // apiece on a VM, 8 groups by default); after a group that handled events (callbacks, posts:
  // time moved) the next one reads again.
  int64_t now = monotonic_ns();
  for (size_t g = 0; g < workers_.size() && handled < max_events; ++g) {
    const size_t n = workers_[g]->progress_on_caller(max_events - handled, now);
    handled += n;
    if (n > 0 && g + 1 < workers_.size()) now = monotonic_ns();
  }
  return handled;
}

Status EngineCore::forget_peer(const MrDesc& desc, size_t group) {
  if (!gate_.accepting()) return fabric_lib::stopped("engine stopped");
  FABRIC_LIB_RETURN_IF_ERROR(check_group(group));
  if (desc.empty() || desc.num_domains() != num_domains()) return invalid_argument("forget_peer: descriptor does not match this engine");
  return workers_[group]->run_sync([&](GroupWorker& w) {
    w.forget_peer(desc);
    return ok_status();
  });
}

// --- GPU progress -----------------------------------------------------------------------------

Result<std::unique_ptr<UvmWatcher::State>> EngineCore::alloc_uvm_watcher(WatchCallback callback) {
  if (!gate_.accepting()) return fabric_lib::stopped("engine stopped");
  if (!callback) return invalid_argument("alloc_uvm_watcher: no callback");
  Result<MappedWord> word = alloc_mapped_word();
  if (!word.ok()) return word.status();
  std::shared_ptr<detail::UvmWatcherHub> hub;
  {
    std::lock_guard lock(watcher_mu_);
    if (!gate_.accepting()) return fabric_lib::stopped("engine stopped");  // stop() may have passed already
    if (!watchers_) {
      detail::UvmWatcherHub::Options o;
      o.cpu = options_.watcher_cpu;
      o.spin = options_.idle_policy == IdlePolicy::kSpin;
      watchers_ = detail::UvmWatcherHub::create(o);
    }
    hub = watchers_;
  }
  Result<uint64_t> id = hub->watch(word->host_ptr(), std::move(callback));
  if (!id.ok()) return id.status();
  auto state = std::make_unique<UvmWatcher::State>();
  state->word = std::move(word).value();
  state->hub = std::move(hub);
  state->id = *id;
  return state;
}

// --- lifecycle --------------------------------------------------------------------------------

Status EngineCore::stop() {
  if (dispatcher_->on_callback_thread()) {
    return Status(ErrorCode::kFailedPrecondition, "stop() cannot be called from a completion callback");
  }
  {
    std::lock_guard lock(watcher_mu_);
    if (watchers_ && watchers_->on_hub_thread()) {
      return Status(ErrorCode::kFailedPrecondition, "stop() cannot be called from a UVM watcher callback");
    }
  }
  std::lock_guard lock(stop_mu_);
  if (stopped_.load()) return ok_status();
  shutdown_workers();
  dispatcher_->shutdown();
  stopped_.store(true, std::memory_order_release);
  return ok_status();
}

void EngineCore::shutdown_workers() {
  gate_.close();
  std::shared_ptr<detail::UvmWatcherHub> hub;
  {
    std::lock_guard lock(watcher_mu_);
    hub = watchers_;
  }
  // Watcher callbacks submit: end them first (a running one finishes; later submits fail). Not
  // under watcher_mu_: a running callback may be allocating a watcher.
  if (hub) hub->stop();
  // A submit still between its "accepting?" check and its hand-over finishes in microseconds —
  // unless it posted on its own thread into a provider call that never returns (the watchdog then
  // gives the group up, and that thread parks for good if the call ever returns: it will not
  // touch the engine again). So once a group was given up on, the wait is bounded.
  const auto given_up_wait = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (gate_.busy()) {
    if (stats_.groups_abandoned.load(std::memory_order_relaxed) > 0 && std::chrono::steady_clock::now() > given_up_wait) {
      FL_LOG_WARN("stop(): a submit is stuck inside a provider call of a given-up group; not waiting for it");
      break;
    }
    std::this_thread::yield();
  }
  for (auto& worker : workers_) worker->stop();  // the watchdog still runs: a worker may get stuck closing
  if (watchdog_) watchdog_->stop();
  imms_->shutdown(cancelled("engine stopped"));
  registry_.clear();
}

std::vector<uint32_t> EngineCore::take_latencies_ns(std::vector<uint32_t> (GroupWorker::*take)()) {
  std::vector<uint32_t> all;
  for (auto& worker : workers_) {
    std::vector<uint32_t> part;
    worker->run_sync([&](GroupWorker& w) {
      part = (w.*take)();
      return ok_status();
    });
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

std::vector<uint32_t> EngineCore::take_submit_latencies_ns() { return take_latencies_ns(&GroupWorker::take_submit_latencies); }

std::vector<uint32_t> EngineCore::take_posting_times_ns() { return take_latencies_ns(&GroupWorker::take_posting_times); }

std::vector<PeerStatus> EngineCore::peer_status(size_t group) {
  std::vector<PeerStatus> out;
  if (group >= workers_.size()) return out;
  workers_[group]->run_sync([&](GroupWorker& w) {
    out = w.peer_status();
    return ok_status();
  });
  return out;
}

}  // namespace fabric_lib::detail

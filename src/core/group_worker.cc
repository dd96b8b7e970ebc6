#include "core/group_worker.h"

#include <pthread.h>
#include <sched.h>

#include <cstring>

#include "core/idle_waiter.h"
#include "core/log.h"
#include "core/peer_group_data.h"

namespace fabric_lib::detail {
namespace {

constexpr size_t kMaxPostsPerPass = 64;
constexpr size_t kMaxEventsPerPoll = 64;
constexpr size_t kRequestsPerAccept = 64;
constexpr size_t kSendSlots = 64;
constexpr size_t kMaxLatencySamples = 1 << 22;

Status pin_to_cpu(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  int ret = pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
  if (ret != 0) return invalid_argument("cannot pin worker to CPU " + std::to_string(cpu) + ": " + std::strerror(ret));
  return ok_status();
}

}  // namespace

GroupWorker::GroupWorker(GroupWorkerConfig config, ImmCounter& imms, CompletionDispatcher& dispatcher,
                         StatCounters& stats)
    : config_(std::move(config)),
      imms_(imms),
      dispatcher_(dispatcher),
      stats_(stats),
      inbox_(std::make_shared<WorkerInbox>()) {}

GroupWorker::~GroupWorker() { stop(); }

Status GroupWorker::start() {
  if (inbox_->event_fd() < 0) return resource_exhausted("eventfd() failed");
  std::promise<Status> opened;
  std::future<Status> result = opened.get_future();
  thread_ = std::thread([this, &opened] { thread_main(&opened); });
  Status status = result.get();
  if (!status.ok()) {
    thread_.join();
  }
  return status;
}

void GroupWorker::stop() {
  if (!thread_.joinable()) return;
  stop_requested_.store(true, std::memory_order_release);
  inbox_->set_sleeping(true);  // force the wake-up write
  inbox_->wake();
  thread_.join();
}

Status GroupWorker::run_sync(std::function<Status(GroupWorker&)> fn) {
  std::promise<Status> done;
  std::future<Status> result = done.get_future();
  inbox_->post([this, &fn, &done](bool alive) {
    done.set_value(alive ? fn(*this) : stopped("engine stopped"));
  });
  return result.get();
}

void GroupWorker::run_async(std::function<void(GroupWorker&)> fn) {
  inbox_->post([this, fn = std::move(fn)](bool alive) {
    if (alive) fn(*this);
  });
}

Status GroupWorker::open_domains() {
  for (const transport::DomainSpec& spec : config_.domains) {
    Result<std::unique_ptr<transport::Domain>> opened = transport::open_domain(spec);
    if (!opened.ok()) {
      return Status(opened.status().code(), "group " + std::to_string(config_.group) + ", domain " +
                                                std::to_string(domains_.size()) + ": " + opened.status().message());
    }
    DomainState state;
    state.domain = std::move(opened).value();
    const transport::DomainInfo& info = state.domain->info();
    state.max_inflight = info.max_inflight;
    if (config_.max_inflight_per_domain > 0) state.max_inflight = std::min(state.max_inflight, config_.max_inflight_per_domain);
    addresses_.push_back(state.domain->address());
    infos_.push_back(info);
    domains_.push_back(std::move(state));
  }
  for (size_t d = 1; d < infos_.size(); ++d) {
    if (infos_[d].transport != infos_[0].transport || infos_[d].delivery_complete != infos_[0].delivery_complete) {
      return invalid_argument("the domains of one group must use the same transport and semantics");
    }
  }
  return ok_status();
}

void GroupWorker::thread_main(std::promise<Status>* opened) {
  pthread_setname_np(pthread_self(), ("fl-worker-" + std::to_string(config_.group)).substr(0, 15).c_str());
  Status status = config_.cpu ? pin_to_cpu(*config_.cpu) : ok_status();
  if (status.ok()) status = open_domains();
  if (!status.ok()) {
    domains_.clear();
    inbox_->close_and_refuse();
    opened->set_value(status);
    return;
  }
  std::vector<transport::Domain*> raw;
  for (DomainState& ds : domains_) raw.push_back(ds.domain.get());
  IdleWaiter idle(config_.idle_policy, *inbox_, raw);
  opened->set_value(ok_status());  // `opened` is gone after this line

  while (!stop_requested_.load(std::memory_order_acquire)) {
    bool busy = inbox_->run_commands() > 0;
    busy |= accept_requests();
    busy |= post_recvs_pending();
    bool must_poll = false;
    bool inflight = false;
    for (size_t d = 0; d < domains_.size(); ++d) {
      busy |= post_pending(d);
      busy |= poll_domain(d);
      must_poll |= !domains_[d].streams.empty() || domains_[d].domain->has_deferred_work();
      inflight |= domains_[d].inflight > 0;
    }
    must_poll |= !recvs_to_post_.empty();
    idle.after_pass(busy, must_poll, inflight);
  }
  shutdown();
}

bool GroupWorker::accept_requests() {
  Request* batch[kRequestsPerAccept];
  const size_t n = inbox_->pop_requests(batch, kRequestsPerAccept);
  for (size_t i = 0; i < n; ++i) {
    Request* r = batch[i];
    live_.insert(r);
    if (r->kind == RequestKind::kSend) {
      r->unposted = 1;
      domains_[0].streams.push_back({r, 0, 1});
      continue;
    }
    r->unposted = static_cast<uint32_t>(r->wrs.size());
    for (size_t d = 0; d < domains_.size(); ++d) {
      const uint32_t begin = r->domain_begin[d];
      const uint32_t end = r->domain_begin[d + 1];
      if (begin < end) domains_[d].streams.push_back({r, begin, end});
    }
    maybe_finish(r);  // a request with no WRs (never accepted by validation, but be safe)
  }
  return n > 0;
}

Result<transport::PeerHandle> GroupWorker::resolve_peer(size_t d, std::span<const uint8_t> address) {
  return domains_[d].peers.resolve(*domains_[d].domain, address);
}

void GroupWorker::forget_peer(size_t d, std::span<const uint8_t> address) {
  domains_[d].peers.forget(*domains_[d].domain, address);
}

transport::PostResult GroupWorker::post_one(size_t d, Stream& s, Status* error) {
  Request& r = *s.request;
  if (r.kind == RequestKind::kSend) return post_send(r, error);
  const planner::WrPlan& w = r.wrs[s.next];
  transport::PeerHandle peer;
  if (r.group) {
    peer = r.group->handles[d][w.target];
  } else if (s.cached_target == w.target) {
    peer = s.cached_peer;
  } else {
    Result<transport::PeerHandle> resolved = resolve_peer(d, r.target_desc(w.target).domain(d).address.bytes());
    if (!resolved.ok()) {
      *error = resolved.status();
      return transport::PostResult::kFailed;
    }
    peer = s.cached_peer = *resolved;
    s.cached_target = w.target;
  }
  const MrDomainEntry& dst = r.target_desc(w.target).domain(d);
  transport::WriteWr wr;
  if (r.src) {
    wr.src = r.src->ptr + w.src_offset;
    wr.src_desc = r.src->domain_mrs[d].desc;
  }
  wr.length = w.length;
  wr.peer = peer;
  wr.remote_addr = dst.addr_base + w.dst_offset;
  wr.rkey = dst.rkey;
  wr.has_imm = r.has_imm;
  wr.imm = r.imm;
  wr.context = reinterpret_cast<uint64_t>(&r);
  return domains_[d].domain->post_write(wr, error);
}

transport::PostResult GroupWorker::post_send(Request& r, Status* error) {
  transport::Domain& domain = *domains_[0].domain;
  if (!send_slots_.ready()) {
    Status s = send_slots_.init(domain, kSendSlots, config_.max_message_bytes);
    if (!s.ok()) {
      *error = s;
      return transport::PostResult::kFailed;
    }
  }
  Result<transport::PeerHandle> peer = resolve_peer(0, r.send_to.bytes());
  if (!peer.ok()) {
    *error = peer.status();
    return transport::PostResult::kFailed;
  }
  const int slot = send_slots_.acquire();
  if (slot < 0) return transport::PostResult::kAgain;
  uint8_t* buf = send_slots_.block().slot(slot);
  if (!r.message.empty()) std::memcpy(buf, r.message.data(), r.message.size());
  transport::SendWr wr{buf, r.message.size(), send_slots_.block().mr.desc, *peer, reinterpret_cast<uint64_t>(&r)};
  transport::PostResult result = domain.post_send(wr, error);
  if (result == transport::PostResult::kPosted) {
    r.send_slot = slot;
  } else {
    send_slots_.release(slot);
  }
  return result;
}

bool GroupWorker::post_pending(size_t d) {
  DomainState& ds = domains_[d];
  size_t posted = 0;
  while (!ds.streams.empty() && ds.inflight < ds.max_inflight && posted < kMaxPostsPerPass) {
    Stream& s = ds.streams.front();
    Request* r = s.request;
    if (r->failed) {  // a failed request posts nothing more
      r->unposted -= s.end - s.next;
      ds.streams.pop_front();
      maybe_finish(r);
      continue;
    }
    Status error;
    const transport::PostResult result = post_one(d, s, &error);
    if (result == transport::PostResult::kAgain) break;
    ++s.next;
    --r->unposted;
    if (result == transport::PostResult::kPosted) {
      ++r->inflight;
      ++ds.inflight;
      ++posted;
      if (r->submit_ns != 0) {
        if (submit_latencies_.size() < kMaxLatencySamples) {
          submit_latencies_.push_back(static_cast<uint32_t>(std::min<int64_t>(monotonic_ns() - r->submit_ns, UINT32_MAX)));
        }
        r->submit_ns = 0;
      }
    } else {
      r->fail(std::move(error));
    }
    if (s.next == s.end) ds.streams.pop_front();
    if (result == transport::PostResult::kFailed) maybe_finish(r);
  }
  if (posted) stats_.wrs_posted.fetch_add(posted, std::memory_order_relaxed);
  return posted > 0;
}

bool GroupWorker::poll_domain(size_t d) {
  DomainState& ds = domains_[d];
  events_.clear();
  const size_t n = ds.domain->poll(events_, kMaxEventsPerPoll);
  for (transport::Event& ev : events_) {
    switch (ev.kind) {
      case transport::EventKind::kWriteDone:
      case transport::EventKind::kSendDone: {
        auto* r = reinterpret_cast<Request*>(ev.context);
        --ds.inflight;
        --r->inflight;
        if (r->send_slot >= 0) {
          send_slots_.release(r->send_slot);
          r->send_slot = -1;
        }
        if (!ev.status.ok()) r->fail(std::move(ev.status));
        maybe_finish(r);
        break;
      }
      case transport::EventKind::kRecvDone:
        on_recv(reinterpret_cast<RecvSlot*>(ev.context), ev);
        break;
      case transport::EventKind::kImm:
        stats_.imms_received.fetch_add(1, std::memory_order_relaxed);
        imms_.add(ev.imm);
        break;
      case transport::EventKind::kRemoteError:
        FL_LOG_WARN("group {} domain {}: {}", config_.group, d, ev.status.to_string());
        break;
    }
  }
  return n > 0;
}

void GroupWorker::maybe_finish(Request* r) {
  if (r->unposted != 0 || r->inflight != 0) return;
  if (!r->delivered) deliver(r, r->failed ? r->error : ok_status());
  live_.erase(r);
  delete r;
}

void GroupWorker::deliver(Request* r, const Status& status) {
  r->delivered = true;
  (status.ok() ? stats_.requests_completed : stats_.requests_failed).fetch_add(1, std::memory_order_relaxed);
  dispatcher_.deliver(std::move(r->completion), status);
  r->src.reset();  // lets an unregistered region close as soon as possible
}

// --- receives -------------------------------------------------------------------------------

Status GroupWorker::add_recv_pool(std::shared_ptr<RecvPool> pool) {
  for (RecvSlot& slot : pool->slots) recvs_to_post_.push_back(&slot);
  recv_pools_.push_back(std::move(pool));
  post_recvs_pending();
  return ok_status();
}

void GroupWorker::repost(RecvSlot* slot) { recvs_to_post_.push_back(slot); }

bool GroupWorker::post_recvs_pending() {
  size_t posted = 0;
  while (!recvs_to_post_.empty()) {
    RecvSlot* slot = recvs_to_post_.back();
    const BufferBlock& block = slot->pool->block;
    transport::RecvWr wr{block.slot(slot->index), block.slot_bytes, block.mr.desc, reinterpret_cast<uint64_t>(slot)};
    Status error;
    const transport::PostResult result = domains_[0].domain->post_recv(wr, &error);
    if (result == transport::PostResult::kAgain) break;
    recvs_to_post_.pop_back();
    if (result == transport::PostResult::kFailed) {
      FL_LOG_ERROR("posting a receive buffer failed: {}", error.to_string());
      if (slot->pool->on_error) {
        dispatcher_.post([pool = slot->pool, error] { pool->on_error(error); });
      }
      continue;
    }
    ++posted;
  }
  return posted > 0;
}

void GroupWorker::on_recv(RecvSlot* slot, const transport::Event& ev) {
  RecvPool* pool = slot->pool;
  std::shared_ptr<RecvPool> owner;
  for (const auto& p : recv_pools_) {
    if (p.get() == pool) owner = p;
  }
  if (!ev.status.ok()) {
    FL_LOG_WARN("receive failed: {}", ev.status.to_string());
    if (pool->on_error) dispatcher_.post([owner, status = ev.status] { owner->on_error(status); });
    repost(slot);
    return;
  }
  stats_.messages_received.fetch_add(1, std::memory_order_relaxed);
  const uint64_t length = std::min<uint64_t>(ev.length, pool->block.slot_bytes);
  // The buffer goes back to the worker only after the callback has read it.
  dispatcher_.post([owner, slot, length, inbox = inbox_, this] {
    owner->on_recv(std::span<const uint8_t>(owner->block.slot(slot->index), length));
    inbox->post([this, slot](bool alive) {
      if (alive) repost(slot);
    });
  });
}

// --- shutdown -------------------------------------------------------------------------------

void GroupWorker::shutdown() {
  inbox_->run_commands();
  while (accept_requests()) {
  }
  const Status why = cancelled("engine stopped");
  for (Request* r : live_) {
    if (!r->delivered) deliver(r, why);
  }
  for (const auto& pool : recv_pools_) {
    if (pool->on_error) dispatcher_.post([pool, why] { pool->on_error(why); });
  }
  inbox_->close_and_refuse();
  // Closing the endpoints ends every outstanding WR; only then may requests and buffers go.
  for (DomainState& ds : domains_) {
    ds.streams.clear();
    ds.domain.reset();
  }
  for (Request* r : live_) delete r;
  live_.clear();
}

}  // namespace fabric_lib::detail

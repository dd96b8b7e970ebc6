// A test decorator that takes the provider out of the write path: registration, peers and
// messages go to the wrapped domain, but a posted WRITE never reaches it — it completes at the
// next poll. What is left when an engine drives it is the engine's own work per request
// (engine-overhead-bench measures its time, alloc_tests its heap allocations). With `one_medium` it
// reports DomainInfo::one_medium and completes a run of WRs posted in one post_writes call as one
// event counting them (Event::count), as the ipc backend does; with `takes_imm_count` (the ipc
// backend's too, the default with one_medium) it says DomainInfo::takes_imm_count, so the engine
// posts a write's shards as one WR (its imms are never delivered here: nothing counts them).
#pragma once

#include <atomic>
#include <memory>
#include <span>
#include <vector>

#include "support/forwarding_domain.h"

namespace fabric_lib::testing {

class InstantDomain final : public ForwardingDomain {
 public:
  // `inner` may be null for a baseline that only posts and polls.
  explicit InstantDomain(std::unique_ptr<transport::Domain> inner, bool one_medium = false,
                         bool takes_imm_count = true)
      : ForwardingDomain(std::move(inner)) {
    if (inner_) info_ = inner_->info();
    info_.one_medium = one_medium;
    info_.takes_imm_count = one_medium && takes_imm_count;
    // Its WRITEs never reach the provider and its users have no peer that can die: application
    // threads may call it (what engine-overhead-bench and the alloc and locked-out tests measure).
    info_.calls_may_hang_on_dead_peer = false;
    // A ring of completed contexts, sized once: the decorator itself allocates nothing per WR
    // (beyond its capacity a post answers kAgain, as a full provider queue would).
    done_.resize(kCapacity);
  }
  const transport::DomainInfo& info() const override { return info_; }
  transport::PostResult post_write(const transport::WriteWr& wr, Status*) override {
    if (tail_ - head_ == kCapacity) return transport::PostResult::kAgain;
    done_[tail_++ % kCapacity] = {wr.context, 1};
    return transport::PostResult::kPosted;
  }
  size_t post_writes(std::span<const transport::WriteWr> wrs, transport::PostResult* last, Status* error) override {
    if (!info_.one_medium || wrs.size() < 2) return Domain::post_writes(wrs, last, error);
    // One event for the run when its WRs share a context (one WR record): the ipc backend's copy.
    for (const transport::WriteWr& wr : wrs) {
      if (wr.context != wrs.front().context) return Domain::post_writes(wrs, last, error);
    }
    *last = transport::PostResult::kPosted;
    if (tail_ - head_ == kCapacity) {
      *last = transport::PostResult::kAgain;
      return 0;
    }
    done_[tail_++ % kCapacity] = {wrs.front().context, static_cast<uint32_t>(wrs.size())};
    return wrs.size();
  }
  size_t poll(std::vector<transport::Event>& out, size_t max) override {
    size_t n = 0;
    while (n < max && head_ != tail_ && !held_.load(std::memory_order_acquire)) {
      transport::Event ev;
      ev.kind = transport::EventKind::kWriteDone;
      const Done& done = done_[head_++ % kCapacity];
      ev.context = done.context;
      ev.count = done.count;
      out.push_back(std::move(ev));
      ++n;
    }
    if (n < max && inner_) n += inner_->poll(out, max - n);
    return n;
  }
  // No deferred work reported: the caller reaps with progress(), and a worker that saw deferred
  // work would spin beside it and contend for the group's ownership, which is not measured here.
  bool has_deferred_work() const override { return false; }
  int wait_fd() const override { return -1; }  // the worker backs off by sleeping
  bool ready_to_block() override { return false; }
  // While held (any thread may set it), posted WRITEs stay outstanding: a test can keep a known
  // number of requests in flight at once.
  void hold(bool held) { held_.store(held, std::memory_order_release); }

 private:
  static constexpr size_t kCapacity = 1 << 16;
  struct Done {
    uint64_t context = 0;
    uint32_t count = 1;
  };
  transport::DomainInfo info_;
  std::vector<Done> done_;
  uint64_t head_ = 0;
  uint64_t tail_ = 0;
  std::atomic<bool> held_{false};
};

}  // namespace fabric_lib::testing

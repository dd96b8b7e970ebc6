// GroupWorker's progress ownership and the threads other than its own that use it: own(), a
// submit posting on the submitter's thread (post_on_caller) and TransferEngine::progress() on an
// application thread (progress_on_caller). The provider's threading model (one thread per domain
// at a time) holds because every provider call is made by the owner.
#include "core/group_worker.h"

#include <algorithm>
#include <thread>

#include "base/clock.h"
#include "base/cpu_relax.h"

namespace fabric_lib::detail {

bool GroupWorker::own() {
  // A submitter trying to post on its own thread goes first (bounded): a spinning worker takes
  // ownership back within nanoseconds of giving it up after a pass, so without this the
  // submitter's tries almost never land and its request waits for the next pass instead.
  constexpr uint32_t kYieldToCallers = 1024;  // ~40 us of pauses at most
  for (uint32_t i = 0; i < kYieldToCallers && callers_trying_.load(std::memory_order_relaxed) != 0; ++i) {
    cpu_relax();
  }
  for (uint32_t i = 0; !try_own(); ++i) {
    if (abandoned()) return false;
    cpu_relax();
    if ((i & 1023) == 1023) std::this_thread::yield();
  }
  if (abandoned()) {
    disown();
    return false;
  }
  return true;
}

bool GroupWorker::post_on_caller(Request* r) {
  if (!config_.post_on_caller || abandoned()) return false;
  // A worker between passes releases ownership for a moment: a few tries catch it.
  // The first try is made unannounced: when it lands (an idle or napping worker) the
  // announcement's two atomic RMWs (~5 ns each) would be spent for nothing.
  constexpr int kTries = 64;
  bool owned = try_own();
  if (!owned) {
    callers_trying_.fetch_add(1, std::memory_order_relaxed);
    for (int i = 1; i < kTries && !(owned = try_own()); ++i) {
      cpu_relax();
    }
    callers_trying_.fetch_sub(1, std::memory_order_relaxed);
  }
  if (!owned) return false;
  if (abandoned() || inbox_->has_requests()) {  // given up on, or requests queued ahead of this one
    disown();
    return false;
  }
  // One clock read serves the request's acceptance, its posting (WR records, metrics) and the
  // wake-up decision below: the submit call's own (SubmitScope, with metrics or submit latency
  // recorded), as old as the call's checks and planning (a few hundred ns for a single write, a
  // few us for a 64-target scatter) plus the ownership tries above — a clock read costs 25-35 ns
  // on a VM's kvm-clock, ~10 % of a single write's engine work (engine-overhead-bench). Never
  // before the worker's latest read (clock_ns_ only moves forward), so metrics time a
  // caller-posted request's submit-to-post as 0, or as the time from its submit call's start to
  // the worker's latest pass — never longer than the submit call itself (docs/operations.md).
  const int64_t now = r->submit_ns != 0 ? std::max(r->submit_ns, clock_ns_) : monotonic_ns();
  clock_ns_ = now;
  accept(r, now);
  // Posts only: reaping is left to the worker (on some domains a poll does the work of a write —
  // the IPC backend's host copies — which must not run inside a submit call).
  for (size_t d = 0; d < domains_.size(); ++d) {
    if (!domains_[d].streams.empty()) post_pending(d);
  }
  disown();
  // The worker polls what was posted here (and wakes for it if it sleeps) — unless an application
  // thread drives progress() now: it reaps the completion itself, and a wake-up per submit would
  // only take a core from it; the worker then naps (at most IdleWaiter::kSpinBudget) and takes
  // over once that thread stops. A worker that blocked before the thread began to poll is woken
  // all the same: it would wait on completion queues' fds only, and the ipc backend's copies
  // signal none — a submit right after a progress() call (the callback thread reaping) waited
  // out the block's 100 ms timeout (Python, ipc host memory, adaptive: 69 of 300 requests).
  if (!caller_polls(now) || inbox_->worker_blocked()) inbox_->poke();
  return true;
}

void GroupWorker::caller_stopped_polling() {
  caller_progress_ns_.store(INT64_MIN / 2, std::memory_order_relaxed);
  inbox_->poke();
}

size_t GroupWorker::progress_on_caller(size_t max_events, int64_t now) {
  if (!config_.post_on_caller || max_events == 0 || abandoned()) return 0;
  caller_progress_ns_.store(now, std::memory_order_relaxed);  // the worker need not spin (IdleWaiter)
  if (!try_own()) return 0;
  if (abandoned() || stop_requested_.load(std::memory_order_acquire)) {  // domains closing or taken over
    disown();
    return 0;
  }
  size_t handled = 0;
  clock_ns_ = std::max(now, clock_ns_);  // read just before the polls: their events' completion time
  for (size_t d = 0; d < domains_.size() && handled < max_events; ++d) {
    handled += poll_domain(d, max_events - handled, /*clock_fresh=*/true);
  }
  // What the events made possible is done here too, within the pass budget: WRs that waited for
  // the slots they freed are posted, receive buffers go back. A thread that drives progress()
  // then never waits for the worker to wake up for them (a paged write larger than the
  // provider's queue went at the worker's wake-up rate before: ~0.01x of raw on shm).
  if (!recvs_to_post_.empty()) post_recvs_pending();
  bool follow_up = !recvs_to_post_.empty();
  const bool worker_blocked = inbox_->worker_blocked();
  for (size_t d = 0; d < domains_.size(); ++d) {
    if (!domains_[d].streams.empty()) {
      post_pending(d);
      // WRs still waiting behind WRs in flight are posted when those complete, by the next
      // progress() or by the worker, which their completions wake. Only WRs that wait with
      // nothing in flight (provider back-pressure) need the worker woken now.
      follow_up |= !domains_[d].streams.empty() && domains_[d].inflight == 0;
    }
    // Work that only polls advance (the ipc backend's copies, perhaps just posted above) would
    // wait for a blocked worker's timeout once this thread stops calling progress() (see
    // post_on_caller): one wake-up, and the worker naps beside this thread from then on.
    follow_up |= worker_blocked && domains_[d].domain->has_deferred_work();
  }
  disown();
  // No wake-up for work a poll merely finished (a reaped imm, a completion).
  if (follow_up) inbox_->poke();
  return handled;
}

}  // namespace fabric_lib::detail

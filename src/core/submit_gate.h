// SubmitGate: whether the engine accepts submits, and the submit calls inside the engine, which
// stop() waits out before it stops the workers (a call between its "accepting?" check and its
// hand-over must not find them gone); also the requests submitted per operation type.
//
// Each submit call is a Scope: it enters, reads open(), and leaves when it returns. Its counts
// live on cache-line stripes, so concurrent submitters do not share (and bounce) one counter. A
// thread with a thread_slot() (base/thread_slot.h) has a stripe of its own and updates it with
// plain loads and stores — three locked instructions fewer per submit than a shared stripe's
// read-modify-writes (single writes ~11 ns faster on the 2-core VM, engine-overhead-bench). Its
// "inside" store is ordered before its open() load by an asymmetric fence
// (base/asymmetric_fence.h), whose heavy half close() makes between clearing the flag and any
// busy() read: a scope either sees the gate closed or is seen by busy(). Threads beyond the slot
// limit, and every thread where membarrier is unavailable, share kSharedStripes stripes with
// atomic read-modify-writes.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "base/asymmetric_fence.h"
#include "base/thread_slot.h"
#include "fabric_lib/metrics.h"

namespace fabric_lib::detail {

class SubmitGate {
  struct alignas(64) Stripe {
    std::atomic<int> inside{0};
    std::atomic<uint64_t> submitted[kNumOpTypes] = {};
  };

 public:
  // One submit call, from construction to destruction (on one thread).
  class Scope {
   public:
    Scope(SubmitGate& gate, OpType op) : gate_(gate), stripe_(gate.stripe(&own_)), op_(op) {
      if (own_) {
        stripe_.inside.store(stripe_.inside.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
        asymmetric_light_fence();  // the store above before open()'s load (close() fences heavily)
      } else {
        stripe_.inside.fetch_add(1, std::memory_order_seq_cst);
      }
    }
    ~Scope() {
      if (own_) {
        // Release: what the call did (its hand-over to the worker) before busy() sees it leave.
        stripe_.inside.store(stripe_.inside.load(std::memory_order_relaxed) - 1, std::memory_order_release);
      } else {
        stripe_.inside.fetch_sub(1, std::memory_order_seq_cst);
      }
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

    // Whether the gate was open once this scope had entered: if so, close() waits for it.
    bool open() const { return gate_.accepting(); }
    OpType op() const { return op_; }
    // One more request of this scope's operation type submitted (requests_submitted).
    void count_submitted() const {
      std::atomic<uint64_t>& c = stripe_.submitted[static_cast<size_t>(op_)];
      if (own_) {
        c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      } else {
        c.fetch_add(1, std::memory_order_relaxed);
      }
    }

   private:
    SubmitGate& gate_;
    bool own_ = false;  // before stripe_: stripe() sets it
    Stripe& stripe_;
    OpType op_;
  };

  SubmitGate() = default;
  SubmitGate(const SubmitGate&) = delete;
  SubmitGate& operator=(const SubmitGate&) = delete;

  // Starts accepting (a new gate is closed).
  void open() { accepting_.store(true, std::memory_order_seq_cst); }
  // Stops accepting: every scope that enters from now on sees open() false, and every scope that
  // saw it true is counted by busy() until it leaves. A syscall (membarrier): stop() only.
  void close();
  bool accepting() const { return accepting_.load(std::memory_order_seq_cst); }
  // Whether a scope is inside.
  bool busy() const;
  // Requests counted by count_submitted(), of one type / of all (any thread; relaxed reads).
  uint64_t submitted(OpType op) const;
  uint64_t submitted() const;

 private:
  static constexpr size_t kSharedStripes = 16;
  // This thread's stripe; `*own`: whether it is this thread's alone (plain stores suffice).
  Stripe& stripe(bool* own);

  std::atomic<bool> accepting_{false};
  const bool own_stripes_ = asymmetric_fences_available();
  // kMaxThreadSlots stripes of their own (by thread_slot()), then kSharedStripes shared ones.
  Stripe stripes_[kMaxThreadSlots + kSharedStripes];
};

}  // namespace fabric_lib::detail

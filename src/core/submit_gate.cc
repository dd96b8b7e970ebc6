#include "core/submit_gate.h"

namespace fabric_lib::detail {

SubmitGate::Stripe& SubmitGate::stripe(bool* own) {
  const int slot = own_stripes_ ? thread_slot() : -1;
  *own = slot >= 0;
  if (*own) return stripes_[slot];
  static std::atomic<size_t> next_thread{0};
  thread_local const size_t mine = next_thread.fetch_add(1, std::memory_order_relaxed);
  return stripes_[kMaxThreadSlots + mine % kSharedStripes];
}

void SubmitGate::close() {
  accepting_.store(false, std::memory_order_seq_cst);
  // Scopes on stripes of their own entered with a compiler barrier only: this fence makes each
  // either see accepting_ false or have its entry visible to busy().
  asymmetric_heavy_fence();
}

bool SubmitGate::busy() const {
  for (const Stripe& s : stripes_) {
    if (s.inside.load(std::memory_order_seq_cst) != 0) return true;
  }
  return false;
}

uint64_t SubmitGate::submitted(OpType op) const {
  uint64_t n = 0;
  for (const Stripe& s : stripes_) n += s.submitted[static_cast<size_t>(op)].load(std::memory_order_relaxed);
  return n;
}

uint64_t SubmitGate::submitted() const {
  uint64_t n = 0;
  for (size_t o = 0; o < kNumOpTypes; ++o) n += submitted(static_cast<OpType>(o));
  return n;
}

}  // namespace fabric_lib::detail

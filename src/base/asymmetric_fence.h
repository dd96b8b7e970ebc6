// Asymmetric fences: the two halves of a store-then-load handshake (Dekker's) where one side runs
// on every request and the other almost never. The frequent side's fence is a compiler barrier
// only; the rare side's makes every running thread of the process execute a full memory barrier
// (membarrier(2), MEMBARRIER_CMD_PRIVATE_EXPEDITED), which orders the frequent side's earlier store
// before its later load as a locked instruction would have (liburcu's and folly's scheme).
//
//   frequent:  flag.store(1, relaxed); asymmetric_light_fence(); if (other.load(relaxed)) ...
//   rare:      other.store(1, relaxed); asymmetric_heavy_fence(); if (flag.load(relaxed)) ...
//
// Either the rare side sees the flag or the frequent side sees `other`, never neither. The light
// fence is only valid while asymmetric_fences_available(): without membarrier (a kernel before
// 4.14, or a sandbox that forbids the call) the frequent side must use a locked instruction.
#pragma once

#include <atomic>

namespace fabric_lib {

// Whether the process registered for expedited private membarriers (tried once, on first call).
bool asymmetric_fences_available();

inline void asymmetric_light_fence() { std::atomic_signal_fence(std::memory_order_seq_cst); }

// A full barrier on every running thread of this process (a syscall; microseconds). Falls back to
// a full fence on this thread alone when membarrier is unavailable (then light fences are not
// enough, see above).
void asymmetric_heavy_fence();

}  // namespace fabric_lib

// A small dense index per live thread, process-wide, for data a thread writes alone (a per-thread
// counter that needs no locked instruction). A thread takes its slot on its first call and gives
// it back when it exits; another thread may then take the same index.
#pragma once

#include <cstddef>

namespace fabric_lib {

inline constexpr size_t kMaxThreadSlots = 128;

// This thread's index in [0, kMaxThreadSlots), or -1 when that many live threads held one at this
// thread's first call (it then stays without one) or the thread is exiting: the caller then uses
// shared, atomically updated data instead.
int thread_slot();

}  // namespace fabric_lib

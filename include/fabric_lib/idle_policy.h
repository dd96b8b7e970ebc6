// How a group's worker (and the UVM watcher thread) waits when there is nothing to do.
#pragma once

#include <cstdint>

namespace fabric_lib {

enum class IdlePolicy : uint8_t {
  kSpin,      // poll continuously: lowest latency, one busy core per group
  kAdaptive,  // spin briefly after activity, then block on the completion queue's fd (or back off)
};

}  // namespace fabric_lib

// Waiting at a target for the imms a request delivers, as test agents and benchmark targets do.
#pragma once

#include <chrono>
#include <cstdint>

#include "fabric_lib/imm_counter.h"
#include "fabric_lib/status.h"

namespace fabric_lib::tools {

// Waits until `imms` counted `n` of `imm` (consuming them). DeadlineExceeded, saying how many came,
// when they did not within `timeout` (the partial count is released). With `exact`, a surplus
// counted right after (duplicated imms) is an Internal error, and released.
Status wait_for_imms(ImmCounter& imms, uint32_t imm, uint64_t n, std::chrono::milliseconds timeout, bool exact);

}  // namespace fabric_lib::tools

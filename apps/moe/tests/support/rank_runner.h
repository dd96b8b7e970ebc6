// Runs steps of one rank of an AllToAll against the reference model (moe_reference.h): every
// step's dispatch output (counts, every row's bytes and scales, in order) and combine output
// (bit-exact) are checked; rows past the valid ones must stay untouched.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "fabric_lib/moe/all_to_all.h"
#include "moe_reference.h"

namespace fabric_lib::moe::testing {

struct RunOptions {
  uint64_t seed = 1;
  uint32_t steps = 4;
  uint64_t first_step = 1;
  // Some steps use fewer valid tokens (bound_m) than max_num_tokens.
  bool vary_tokens = true;
  // Called after each step's dispatch_send, before dispatch_recv (tests use it to pause or die).
  std::function<void(uint64_t step)> after_dispatch_send;
};

// Valid tokens of `rank` at `step` (a pure function, so every rank computes every rank's).
uint32_t tokens_of(const MoeConfig& c, const RunOptions& o, uint64_t step, uint32_t rank);

struct StepReport {
  uint64_t step = 0;
  Status status;                 // the library's status, or an Internal "mismatch" from the checks
  uint64_t combine_digest = 0;   // rows_digest of this rank's combine output
  uint32_t recv_rows = 0;        // padded rows this rank received
};

// Runs o.steps steps; calls `report` after each; stops at the first failure (returned).
Status run_rank(AllToAll& a2a, const RunOptions& o, const std::function<void(const StepReport&)>& report);

}  // namespace fabric_lib::moe::testing

// The engine's side of a Completion and a RepeatingSink (fabric_lib/completion.h,
// fabric_lib/imm_counter.h): delivering them inline, or handing callbacks to the callback thread.
#pragma once

#include <cstdint>
#include <functional>

#include "fabric_lib/completion.h"
#include "fabric_lib/imm_counter.h"

namespace fabric_lib {

class CompletionDelivery {
 public:
  using Post = std::function<void(std::function<void()>)>;

  // Delivers on the calling thread: bumps the counter, stores the flag, or runs the callback.
  static void deliver_inline(Completion& completion, const Status& status);
  // The callback, moved out (for dispatch to the callback thread).
  static CompletionCallback take_callback(Completion& completion) { return std::move(completion.fn_); }

  // Rounds [first, last] of a repeating sink fired (Ok): counters and flags here, callbacks
  // through `post` (one call per round, in order).
  static void deliver_rounds(const RepeatingSink& sink, uint64_t first, uint64_t last, const Post& post);
  // The repeating sink ended with `status` after `rounds` rounds.
  static void deliver_end(const RepeatingSink& sink, uint64_t rounds, const Status& status, const Post& post);
};

}  // namespace fabric_lib

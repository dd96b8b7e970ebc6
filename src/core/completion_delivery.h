// The engine's side of a Completion (fabric_lib/completion.h): delivering it inline, or taking its
// callback out to run on the callback thread.
#pragma once

#include "fabric_lib/completion.h"

namespace fabric_lib {

class CompletionDelivery {
 public:
  // Delivers on the calling thread: bumps the counter, stores the flag, or runs the callback.
  static void deliver_inline(Completion& completion, const Status& status);
  // The callback, moved out (for dispatch to the callback thread).
  static CompletionCallback take_callback(Completion& completion) { return std::move(completion.fn_); }
};

}  // namespace fabric_lib

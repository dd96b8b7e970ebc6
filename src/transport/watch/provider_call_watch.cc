#include "transport/watch/provider_call_watch.h"

#include <chrono>
#include <thread>

namespace fabric_lib::transport {

// Touches nothing, not even the logger: the process may be tearing it down (the watchdog logged
// when it gave the thread up).
void ProviderCallWatch::park_forever() {
  for (;;) std::this_thread::sleep_for(std::chrono::hours(24));
}

}  // namespace fabric_lib::transport

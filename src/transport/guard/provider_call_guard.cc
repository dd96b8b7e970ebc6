#include "transport/guard/provider_call_guard.h"

#include <chrono>
#include <thread>

namespace fabric_lib::transport {

// Touches nothing, not even the logger: the process may be tearing it down (the watchdog logged
// when it gave the thread up).
void ProviderCallGuard::park_forever() {
  for (;;) std::this_thread::sleep_for(std::chrono::hours(24));
}

}  // namespace fabric_lib::transport

#include "transport/watch/provider_call_watch.h"

#include <chrono>
#include <thread>

#include "core/log.h"

namespace fabric_lib::transport {

void ProviderCallWatch::park_forever() {
  FL_LOG_ERROR("a provider call returned after its worker was given up on; the thread stays parked");
  for (;;) std::this_thread::sleep_for(std::chrono::hours(24));
}

}  // namespace fabric_lib::transport

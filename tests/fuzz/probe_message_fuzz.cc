// libFuzzer target: the liveness probe's control messages (they arrive from any peer). Either
// rejected with kMalformed, or decoded and re-encoded to the same bytes.
#include <cstdint>
#include <cstdlib>
#include <span>

#include "core/probe_message.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto m = fabric_lib::detail::ProbeMessage::decode(std::span<const uint8_t>(data, size));
  if (m.ok()) {
    const std::vector<uint8_t> again = m->encode();
    if (again.size() != size || !std::equal(again.begin(), again.end(), data)) std::abort();
    if (again.size() > fabric_lib::detail::kMaxProbeMessageBytes) std::abort();
  } else if (m.status().code() != fabric_lib::ErrorCode::kMalformed) {
    std::abort();
  }
  return 0;
}

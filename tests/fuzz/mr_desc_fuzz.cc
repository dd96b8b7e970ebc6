// libFuzzer target: MrDesc::from_bytes / from_hex on arbitrary bytes (descriptors arrive from
// the network). Either it rejects the input with kMalformed, or the decoded descriptor encodes
// back to exactly the same bytes.
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string_view>

#include "fabric_lib/memory.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using fabric_lib::ErrorCode;
  auto desc = fabric_lib::MrDesc::from_bytes(std::span<const uint8_t>(data, size));
  if (desc.ok()) {
    const std::vector<uint8_t> again = desc->to_bytes();
    if (again.size() != size || !std::equal(again.begin(), again.end(), data)) std::abort();
    for (size_t d = 0; d <= desc->num_domains(); ++d) (void)desc->domain(d).address.bytes().size();
  } else if (desc.status().code() != ErrorCode::kMalformed) {
    std::abort();
  }
  auto from_hex = fabric_lib::MrDesc::from_hex(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!from_hex.ok() && from_hex.status().code() != ErrorCode::kMalformed) std::abort();
  return 0;
}

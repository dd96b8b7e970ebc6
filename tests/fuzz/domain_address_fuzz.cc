// libFuzzer target: DomainAddress::from_bytes / from_hex and the hex codec on arbitrary bytes.
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string_view>

#include "fabric_lib/domain_address.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using fabric_lib::ErrorCode;
  auto a = fabric_lib::DomainAddress::from_bytes(std::span<const uint8_t>(data, size));
  if (a.ok()) {
    if (a->bytes().size() != size) std::abort();
    auto back = fabric_lib::DomainAddress::from_hex(a->to_hex());
    if (!back.ok() || !(*back == *a)) std::abort();
  } else if (a.status().code() != ErrorCode::kMalformed) {
    std::abort();
  }
  auto h = fabric_lib::from_hex(std::string_view(reinterpret_cast<const char*>(data), size));
  if (h.ok() && fabric_lib::to_hex(*h).size() != size) std::abort();
  return 0;
}

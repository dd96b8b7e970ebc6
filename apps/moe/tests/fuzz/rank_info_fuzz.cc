// libFuzzer target: RankInfo::decode on arbitrary bytes (they come from other ranks). Either it
// refuses them with kMalformed, or the decoded info encodes back to exactly the same bytes.
#include <cstdint>
#include <cstdlib>
#include <span>

#include "fabric_lib/moe/wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fabric_lib;
  Result<moe::RankInfo> info = moe::RankInfo::decode(std::span<const uint8_t>(data, size));
  if (info.ok()) {
    const std::vector<uint8_t> again = info->encode();
    if (again.size() != size || !std::equal(again.begin(), again.end(), data)) std::abort();
    if (info->rank >= info->world) std::abort();
  } else if (info.status().code() != ErrorCode::kMalformed) {
    std::abort();
  }
  return 0;
}

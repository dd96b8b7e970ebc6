// libFuzzer target: decode_message on arbitrary bytes (KV control messages arrive from the
// network). Either it rejects the input with kMalformed, or the decoded message encodes back to
// exactly the same bytes (the codec is canonical) and its fields obey the rules decode checks.
#include <cstdint>
#include <cstdlib>
#include <span>

#include "fabric_lib/kv/messages.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fabric_lib::kv;
  auto m = decode_message(std::span<const uint8_t>(data, size));
  if (!m.ok()) {
    if (m.status().code() != fabric_lib::ErrorCode::kMalformed) std::abort();
    (void)decode_header(std::span<const uint8_t>(data, size));
    return 0;
  }
  const std::vector<uint8_t> again = encode_message(*m);
  if (again.size() != size || !std::equal(again.begin(), again.end(), data)) std::abort();
  if (const auto* d = std::get_if<DispatchMessage>(&m->body)) {
    if (!d->layout.validate().ok() || d->dst_pages.size() > kMaxPagesPerRequest) std::abort();
    for (uint32_t p : d->dst_pages) if (p >= d->memory.num_pages) std::abort();
    if (!plan_pair(d->layout, {d->prefill_rank, d->prefill_tp}, d->decoder).ok()) std::abort();
  }
  return 0;
}

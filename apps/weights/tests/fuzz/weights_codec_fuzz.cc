// libFuzzer target for every decoder of the weights app's messages and for the frame
// reassembler. Byte 0 picks the decoder; the rest is the message. Decoded metadata must
// re-encode to the same bytes, and small decoded metadata goes through the planner's validation.
#include <cstddef>
#include <cstdint>
#include <span>

#include "fabric_lib/weights/codec.h"
#include "fabric_lib/weights/plan.h"

using namespace fabric_lib::weights;

namespace {
template <typename T, typename D>
void check(std::span<const uint8_t> b, D decode) {
  fabric_lib::Result<T> r = decode(b);
  if (!r.ok()) return;
  const std::vector<uint8_t> again = encode(*r);
  if (again.size() != b.size() || !std::equal(again.begin(), again.end(), b.begin())) __builtin_trap();
}

uint64_t elements(const TrainerMetadata& m) {
  uint64_t n = 0;
  for (const auto& s : m.shards) {
    uint64_t e = 1;
    for (uint64_t d : s.global_shape) e = d > (1u << 20) ? (1u << 31) : e * d;
    n += e;
  }
  return n;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::span<const uint8_t> b(data + 1, size - 1);
  switch (data[0] % 9) {
    case 0: {
      check<TrainerMetadata>(b, decode_trainer_metadata);
      auto t = decode_trainer_metadata(b);
      if (t.ok() && elements(*t) < (1u << 22)) {
        InferenceMetadata i;
        i.world = 1;
        i.address = t->address;
        (void)plan_schedule({*t}, {i});
      }
      break;
    }
    case 1: check<InferenceMetadata>(b, decode_inference_metadata); break;
    case 2: check<TrainerSetup>(b, decode_trainer_setup); break;
    case 3: check<InferenceSetup>(b, decode_inference_setup); break;
    case 4: check<TrainerReady>(b, decode_trainer_ready); break;
    case 5: check<Peers>(b, decode_peers); break;
    case 6: check<PlanError>(b, decode_plan_error); break;
    case 7: (void)message_kind(b); break;
    default: {  // frames: u16 length prefixes
      Reassembler r(1 << 20);
      size_t pos = 0;
      while (pos + 2 <= b.size()) {
        const size_t n = std::min<size_t>(b.size() - pos - 2, b[pos] | (b[pos + 1] << 8));
        (void)r.add(b.subspan(pos + 2, n));
        pos += 2 + n;
      }
    }
  }
  return 0;
}

#include <algorithm>
#include <cstring>

#include "fabric_lib/weights/codec.h"
#include "fabric_lib/weights/plan.h"
#include "wire.h"

namespace fabric_lib::weights {

uint64_t fingerprint(const Schedule& s) {
  // FNV-1a over 8-byte little-endian words (then the tail bytes): the same bytes, the same value.
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](const std::vector<uint8_t>& b) {
    size_t i = 0;
    for (; i + 8 <= b.size(); i += 8) {
      uint64_t w;
      std::memcpy(&w, b.data() + i, 8);
      h = (h ^ w) * 1099511628211ull;
    }
    for (; i < b.size(); ++i) h = (h ^ b[i]) * 1099511628211ull;
  };
  wire::Writer head;
  head.u32(s.domains);
  head.u32(static_cast<uint32_t>(s.group_names.size()));
  for (const std::string& g : s.group_names) head.str(g);
  for (const InferencePlan& p : s.inference) {
    head.u32(p.rank);
    head.u64(p.data_imms);
    head.u64(p.bytes);
  }
  mix(head.out());
  std::vector<uint8_t> buf;
  for (const TrainerPlan& p : s.trainers) {
    buf.clear();
    append_plan(buf, p);
    mix(buf);
  }
  return h;
}

ScheduleStats schedule_stats(const Schedule& s) {
  ScheduleStats st;
  const size_t T = s.trainers.size(), I = s.inference.size(), D = s.domains;
  st.trainer_bytes.assign(T, 0);
  st.trainer_wrs.assign(T, 0);
  st.trainer_prepared.assign(T, 0);
  st.trainer_nic_bytes.assign(T * D, 0);
  st.inference_bytes.assign(I, 0);
  st.inference_nic_bytes.assign(I * D, 0);
  for (const TrainerPlan& p : s.trainers) {
    auto count = [&](const WriteOp& w) {
      const uint64_t bytes = w.length * w.pages;
      st.trainer_bytes[p.rank] += bytes;
      st.trainer_wrs[p.rank] += w.pages > 1 ? w.pages : std::max<uint64_t>(1, (w.length + kMaxWrBytes - 1) / kMaxWrBytes);
      st.trainer_nic_bytes[p.rank * D + w.domain] += bytes;
      const Target& t = p.targets[w.target];
      if (t.kind == Target::Kind::kInference) {
        st.inference_bytes[t.rank] += bytes;
        st.inference_nic_bytes[t.rank * D + w.domain] += bytes;
      }
    };
    for (const PrepareTask& t : p.tasks) {
      for (const WriteOp& w : t.writes) count(w);
      for (const WriteOp& w : t.scale_writes) count(w);
      ++st.tasks;
    }
    for (const Contribution& c : p.contributions) count(c.write);
    st.contributions += p.contributions.size();
    st.staged_units += p.staged.size();
    // Source bytes the trainer reads to prepare (as stored: the H2D and quantize input).
    for (const PrepareTask& t : p.tasks) {
      if (t.direct) continue;
      const DType src = t.source == PrepareTask::Source::kStaging ? p.staged[t.index].source_dtype : DType::kBf16;
      st.trainer_prepared[p.rank] += t.box.elements() * element_size(src);
    }
  }
  return st;
}

}  // namespace fabric_lib::weights

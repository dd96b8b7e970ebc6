#include "support/simulate.h"

#include <cstring>

namespace fabric_lib::weights::testing {
namespace {

Status apply(const WriteOp& w, const uint8_t* src, size_t src_len, std::vector<uint8_t>& dst) {
  for (uint32_t i = 0; i < w.pages; ++i) {
    const uint64_t so = w.src_offset + i * w.src_stride, d = w.dst_offset + i * w.dst_stride;
    if (so + w.length > src_len || d + w.length > dst.size()) return out_of_range("simulated write outside a region");
    std::memcpy(dst.data() + d, src + so, w.length);
  }
  return ok_status();
}

}  // namespace

Status simulate(const Schedule& s, const std::vector<std::vector<TrainerShard>>& trainer_shards,
                const std::vector<std::vector<std::vector<uint8_t>*>>& trainer_regions,
                const std::vector<std::vector<std::vector<uint8_t>*>>& inference_regions) {
  std::vector<std::vector<uint8_t>> staging(s.trainers.size());
  for (const TrainerPlan& p : s.trainers) staging[p.rank].assign(p.staging_bytes, 0);
  auto target = [&](const TrainerPlan& p, uint32_t i) -> std::vector<uint8_t>& {
    const Target& t = p.targets[i];
    return t.kind == Target::Kind::kInference ? *inference_regions[t.rank][t.region] : staging[t.rank];
  };
  // Gathers: other trainers' contributions, then each gatherer's own parts.
  for (const TrainerPlan& p : s.trainers) {
    for (const Contribution& c : p.contributions) {
      const std::vector<uint8_t>& region = *trainer_regions[p.rank][trainer_shards[p.rank][c.shard].region];
      FABRIC_LIB_RETURN_IF_ERROR(apply(c.write, region.data(), region.size(), target(p, c.write.target)));
    }
  }
  for (const TrainerPlan& p : s.trainers) {
    for (const StagedUnit& u : p.staged) {
      for (const LocalPart& l : u.local_parts) {
        const TrainerShard& sh = trainer_shards[p.rank][l.shard];
        const size_t es = element_size(sh.dtype);
        const uint8_t* src = trainer_regions[p.rank][sh.region]->data() + sh.offset +
                             ((l.box.r0 - sh.box.r0) * sh.box.cols() + (l.box.c0 - sh.box.c0)) * es;
        uint8_t* dst = staging[p.rank].data() + u.staging_offset + ((l.box.r0 - u.box.r0) * u.box.cols() + (l.box.c0 - u.box.c0)) * es;
        copy_box(src, sh.box.cols(), dst, u.box.cols(), l.box.rows(), l.box.cols(), es);
      }
    }
  }
  for (const TrainerPlan& p : s.trainers) {
    for (const PrepareTask& t : p.tasks) {
      std::vector<uint8_t> prepared;
      const uint8_t* src = nullptr;
      size_t src_len = 0;
      if (t.direct) {
        const TrainerShard& sh = trainer_shards[p.rank][t.index];
        src = trainer_regions[p.rank][sh.region]->data();
        src_len = trainer_regions[p.rank][sh.region]->size();
      } else {
        prepared.resize(t.prepared_bytes());
        if (t.source == PrepareTask::Source::kShard) {
          const TrainerShard& sh = trainer_shards[p.rank][t.index];
          const uint8_t* base = trainer_regions[p.rank][sh.region]->data() + sh.offset +
                                ((t.box.r0 - sh.box.r0) * sh.box.cols() + (t.box.c0 - sh.box.c0)) * element_size(sh.dtype);
          FABRIC_LIB_RETURN_IF_ERROR(prepare_on_cpu(t, sh.dtype, base, sh.box.cols(), prepared.data()));
        } else {
          const StagedUnit& u = p.staged[t.index];
          FABRIC_LIB_RETURN_IF_ERROR(prepare_on_cpu(t, u.source_dtype, staging[p.rank].data() + u.staging_offset, u.box.cols(), prepared.data()));
        }
        src = prepared.data();
        src_len = prepared.size();
      }
      for (const WriteOp& w : t.writes) FABRIC_LIB_RETURN_IF_ERROR(apply(w, src, src_len, target(p, w.target)));
      for (const WriteOp& w : t.scale_writes) FABRIC_LIB_RETURN_IF_ERROR(apply(w, src, src_len, target(p, w.target)));
    }
  }
  return ok_status();
}

}  // namespace fabric_lib::weights::testing

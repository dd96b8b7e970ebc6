// plan_schedule(): decomposes every unique piece into tasks (boxes one trainer box holds, or
// staged boxes that straddle trainer shards under fp8 blocks), picks owners and gatherers that
// balance bytes, and emits each trainer's writes pinned to balanced domains.
#include <algorithm>
#include <map>
#include <unordered_map>
#include <numeric>

#include "plan_index.h"

namespace fabric_lib::weights {

uint64_t imm_count(const WriteOp& w, size_t domains) {
  if (w.pages > 1) return w.pages;
  return imm_count_of_write(w.length, Pinned{w.domain}, domains);
}

uint64_t PrepareTask::prepared_bytes() const {
  if (direct) return 0;
  if (dtype != DType::kFp8E4m3) return data_bytes();
  const uint64_t blocks = ((box.rows() + kFp8Block - 1) / kFp8Block) * ((box.cols() + kFp8Block - 1) / kFp8Block);
  return scale_offset() + blocks * 4;
}

namespace {

using planner::Destination;
using planner::Index;
using planner::Owner;
using planner::SourceInfo;
using planner::UniquePiece;

struct Part {
  uint32_t box = 0;  // index into the source's boxes
  Box part;
  Owner from;        // who supplies it (assign_owners)
  bool local = false;  // the gatherer holds it itself
};

struct Unit {
  uint32_t piece = 0;
  Box box;
  bool staged = false;
  uint32_t box_index = 0;               // local units: the trainer box holding it
  uint32_t parts_begin = 0, parts_end = 0;  // staged units: into Planner::parts
  uint32_t owner = 0, owner_shard = 0;
  uint64_t cost = 0;                    // bytes its owner sends for it
};

uint64_t blocks(uint64_t n) { return (n + kFp8Block - 1) / kFp8Block; }

// Interval index of [a, ...) in sorted cuts: cuts[i] <= a < cuts[i + 1].
size_t interval_of(const std::vector<uint64_t>& cuts, uint64_t a) {
  return std::upper_bound(cuts.begin(), cuts.end(), a) - cuts.begin() - 1;
}

class Planner {
 public:
  Planner(Index& ix, const PlanOptions& o) : ix_(ix), o_(o), D_(ix.domains) {}

  Result<Schedule> run() {
    for (uint32_t p = 0; p < ix_.pieces.size(); ++p) decompose(p);
    assign_owners();
    Schedule s;
    s.domains = D_;
    for (const GroupRule& g : o_.groups) s.group_names.push_back(g.name);
    s.trainers.resize(ix_.trainers.size());
    s.inference.resize(ix_.inference.size());
    for (uint32_t t = 0; t < s.trainers.size(); ++t) {
      s.trainers[t].rank = t;
      s.trainers[t].gather_imms.assign(o_.groups.size(), 0);
    }
    for (uint32_t r = 0; r < s.inference.size(); ++r) s.inference[r].rank = r;
    tload_.assign(s.trainers.size() * D_, 0);
    iload_.assign(s.inference.size() * D_, 0);
    init_targets(s);
    // Emit group by group (stable: canonical order inside a group), so that every trainer's tasks
    // and contributions come out in execution order.
    std::vector<uint32_t> order(units_.size());
    {  // a counting sort by group: stable, and linear (1M+ units at scale)
      std::vector<size_t> start(o_.groups.size() + 1, 0);
      for (const Unit& u : units_) ++start[src(u).group + 1];
      for (size_t g = 1; g < start.size(); ++g) start[g] += start[g - 1];
      for (uint32_t i = 0; i < units_.size(); ++i) order[start[src(units_[i]).group]++] = i;
    }
    std::vector<size_t> tasks(s.trainers.size(), 0);
    for (const Unit& u : units_) ++tasks[u.owner];
    for (size_t t = 0; t < tasks.size(); ++t) s.trainers[t].tasks.reserve(tasks[t]);
    for (uint32_t i : order) emit(s, units_[i]);
    return s;
  }

 private:
  const SourceInfo& src(const Unit& u) const { return ix_.sources[ix_.pieces[u.piece].source]; }
  bool fp8(uint32_t piece) const { return ix_.pieces[piece].dtype == DType::kFp8E4m3; }

  uint64_t prepared_bytes(uint32_t piece, const Box& b) const {
    PrepareTask t;
    t.box = b;
    t.dtype = ix_.pieces[piece].dtype;
    return t.prepared_bytes();
  }

  // Row chunk (in rows) that keeps a task of `cols` columns under max_task_bytes.
  uint64_t chunk_rows(uint32_t piece, uint64_t cols) const {
    const UniquePiece& p = ix_.pieces[piece];
    const uint64_t row_bytes = cols * element_size(p.dtype);
    uint64_t rows = std::max<uint64_t>(1, o_.max_task_bytes / std::max<uint64_t>(1, row_bytes));
    if (p.dtype == DType::kFp8E4m3) rows = std::max<uint64_t>(kFp8Block, rows / kFp8Block * kFp8Block);
    return rows;
  }

  void add_local(uint32_t piece, const Box& b, uint32_t box_index) {
    const uint64_t step = chunk_rows(piece, b.cols());
    for (uint64_t r = b.r0; r < b.r1; r += step) {
      Unit u;
      u.piece = piece;
      u.box = Box{r, std::min(b.r1, r + step), b.c0, b.c1};
      u.box_index = box_index;
      units_.push_back(u);
    }
  }

  void add_staged(uint32_t piece, const Box& b) {
    const SourceInfo& si = ix_.sources[ix_.pieces[piece].source];
    const uint64_t step = chunk_rows(piece, b.cols());
    for (uint64_t r = b.r0; r < b.r1; r += step) {
      Unit u;
      u.piece = piece;
      u.staged = true;
      u.box = Box{r, std::min(b.r1, r + step), b.c0, b.c1};
      u.parts_begin = static_cast<uint32_t>(parts_.size());
      for (size_t ri = interval_of(si.row_cuts, u.box.r0); ri + 1 < si.row_cuts.size() && si.row_cuts[ri] < u.box.r1; ++ri) {
        for (size_t ci = interval_of(si.col_cuts, u.box.c0); ci + 1 < si.col_cuts.size() && si.col_cuts[ci] < u.box.c1; ++ci) {
          const Box cell{si.row_cuts[ri], si.row_cuts[ri + 1], si.col_cuts[ci], si.col_cuts[ci + 1]};
          const Box part = intersect(cell, u.box);
          const uint32_t bi = si.cell(ri, ci);
          if (parts_.size() > u.parts_begin && parts_.back().box == bi && parts_.back().part.r0 == part.r0 &&
              parts_.back().part.r1 == part.r1 && parts_.back().part.c1 == part.c0) {
            parts_.back().part.c1 = part.c1;  // same trainer box, adjacent columns
          } else {
            parts_.push_back({bi, part});
          }
        }
      }
      u.parts_end = static_cast<uint32_t>(parts_.size());
      units_.push_back(u);
    }
  }

  // A segment of consecutive blocks along one axis: clean (inside cut interval `interval`) or dirty.
  struct Segment {
    uint64_t begin = 0, end = 0;  // element coordinates in the source view
    bool clean = true;
    size_t interval = 0;
  };
  // O(number of cuts), not of blocks: only blocks holding an off-grid cut are dirty.
  std::vector<Segment> segments(const std::vector<uint64_t>& cuts, uint64_t lo, uint64_t hi, bool blocked) const {
    std::vector<Segment> out;
    auto clean = [&](uint64_t a, uint64_t b) {  // [a, b) split at the cuts
      for (size_t i = interval_of(cuts, a); a < b; ++i) {
        const uint64_t e = std::min(b, cuts[i + 1]);
        out.push_back({a, e, true, i});
        a = e;
      }
    };
    uint64_t cur = lo;
    if (blocked) {
      const auto first = std::upper_bound(cuts.begin(), cuts.end(), lo);
      for (auto it = first; it != cuts.end() && *it < hi; ++it) {
        if ((*it - lo) % kFp8Block == 0) continue;
        const uint64_t b0 = lo + (*it - lo) / kFp8Block * kFp8Block, b1 = std::min(hi, b0 + kFp8Block);
        if (b0 < cur) {  // the same block as the previous off-grid cut
          continue;
        }
        clean(cur, b0);
        if (!out.empty() && !out.back().clean && out.back().end == b0) {
          out.back().end = b1;
        } else {
          out.push_back({b0, b1, false, 0});
        }
        cur = b1;
      }
    }
    clean(cur, hi);
    return out;
  }

  void decompose(uint32_t piece) {
    const UniquePiece& p = ix_.pieces[piece];
    const SourceInfo& si = ix_.sources[p.source];
    const bool blocked = p.dtype == DType::kFp8E4m3;
    const std::vector<Segment> rows = segments(si.row_cuts, p.box.r0, p.box.r1, blocked);
    const std::vector<Segment> cols = segments(si.col_cuts, p.box.c0, p.box.c1, blocked);
    for (const Segment& rs : rows) {
      if (!rs.clean) {
        add_staged(piece, Box{rs.begin, rs.end, p.box.c0, p.box.c1});
        continue;
      }
      // Consecutive clean column segments of the same trainer box form one local box.
      size_t i = 0;
      while (i < cols.size()) {
        if (!cols[i].clean) {
          add_staged(piece, Box{rs.begin, rs.end, cols[i].begin, cols[i].end});
          ++i;
          continue;
        }
        const uint32_t bi = si.cell(rs.interval, cols[i].interval);
        size_t j = i + 1;
        while (j < cols.size() && cols[j].clean && si.cell(rs.interval, cols[j].interval) == bi) ++j;
        add_local(piece, Box{rs.begin, rs.end, cols[i].begin, cols[j - 1].end}, bi);
        i = j;
      }
    }
  }

  Owner least_loaded(std::span<const Owner> owners) const {
    Owner best = owners[0];
    for (const Owner& o : owners) {
      if (load_[o.rank] < load_[best.rank]) best = o;
    }
    return best;
  }

  void assign_owners() {
    load_.assign(ix_.trainers.size(), 0);
    std::vector<uint32_t> multi;
    for (uint32_t i = 0; i < units_.size(); ++i) {
      Unit& u = units_[i];
      u.cost = prepared_bytes(u.piece, u.box) * ix_.pieces[u.piece].destinations.size();
      if (u.staged) continue;
      const auto& owners = src(u).owners(u.box_index);
      if (owners.size() == 1) {
        u.owner = owners[0].rank;
        u.owner_shard = owners[0].shard;
        load_[u.owner] += u.cost;
      } else {
        multi.push_back(i);
      }
    }
    // Staged boxes next (their choice is narrow): the least loaded owner of any part gathers;
    // each other part comes from its least loaded replica (or is a local copy when the gatherer
    // holds one).
    for (Unit& u : units_) {
      if (!u.staged) continue;
      const SourceInfo& si = src(u);
      std::vector<Owner> candidates;
      for (uint32_t k = u.parts_begin; k < u.parts_end; ++k) {
        for (const Owner& o : si.owners(parts_[k].box)) candidates.push_back(o);
      }
      std::stable_sort(candidates.begin(), candidates.end(), [](const Owner& a, const Owner& b) { return a.rank < b.rank; });
      u.owner = least_loaded(candidates).rank;
      load_[u.owner] += u.cost;
      for (uint32_t k = u.parts_begin; k < u.parts_end; ++k) {
        Part& part = parts_[k];
        const std::span<const Owner> owners = si.owners(part.box);
        auto mine = std::find_if(owners.begin(), owners.end(), [&](const Owner& o) { return o.rank == u.owner; });
        part.local = mine != owners.end();
        part.from = part.local ? *mine : least_loaded(owners);
        if (!part.local) load_[part.from.rank] += part.part.elements() * element_size(si.dtype);
      }
    }
    // Replicated boxes last, largest first onto the least loaded replica (LPT): they fill the gaps.
    std::stable_sort(multi.begin(), multi.end(), [&](uint32_t a, uint32_t b) { return units_[a].cost > units_[b].cost; });
    for (uint32_t i : multi) {
      Unit& u = units_[i];
      const Owner o = least_loaded(src(u).owners(u.box_index));
      u.owner = o.rank;
      u.owner_shard = o.shard;
      load_[u.owner] += u.cost;
    }
  }

  // Target ids per trainer: a flat table when the (kind, rank, region) space is small (it is, but
  // for engines that register every tensor separately), else a hash map.
  void init_targets(const Schedule& s) {
    regions_ = 1;
    for (const InferenceMetadata* m : ix_.inference) regions_ = std::max<uint64_t>(regions_, m->regions.size());
    slots_ = ix_.inference.size() * regions_ + ix_.trainers.size();
    if (slots_ * s.trainers.size() <= (1u << 26)) {
      flat_targets_.assign(slots_ * s.trainers.size(), UINT32_MAX);
    } else {
      slots_ = 0;
      target_ids_.resize(s.trainers.size());
    }
  }
  uint32_t target_id(Schedule& s, uint32_t trainer, Target t) {
    std::vector<Target>& targets = s.trainers[trainer].targets;
    if (slots_) {
      const uint64_t k = t.kind == Target::Kind::kInference ? t.rank * regions_ + t.region : ix_.inference.size() * regions_ + t.rank;
      uint32_t& id = flat_targets_[trainer * slots_ + k];
      if (id == UINT32_MAX) {
        id = static_cast<uint32_t>(targets.size());
        targets.push_back(t);
      }
      return id;
    }
    const uint64_t key = (static_cast<uint64_t>(t.kind) << 63) | (static_cast<uint64_t>(t.rank) << 32) | t.region;
    auto [it, inserted] = target_ids_[trainer].try_emplace(key, static_cast<uint32_t>(targets.size()));
    if (inserted) targets.push_back(t);
    return it->second;
  }

  // The domain that evens out the sender's and the receiver's NIC loads.
  uint32_t pick_domain(uint32_t trainer, std::vector<uint64_t>& recv, uint32_t recv_rank, uint64_t bytes) {
    uint64_t* tl = &tload_[trainer * D_];
    uint64_t* rl = &recv[recv_rank * D_];
    uint32_t best = 0;
    for (uint32_t d = 1; d < D_; ++d) {
      if (tl[d] + rl[d] < tl[best] + rl[best]) best = d;
    }
    tl[best] += bytes;
    rl[best] += bytes;
    return best;
  }

  // A write of `rows` x `row_bytes` from a source of pitch src_pitch to a destination of pitch
  // dst_pitch: one contiguous write when both are dense, else one page per row.
  static WriteOp strided(uint64_t rows, uint64_t row_bytes, uint64_t src_offset, uint64_t src_pitch,
                         uint64_t dst_offset, uint64_t dst_pitch) {
    WriteOp w;
    w.src_offset = src_offset;
    w.dst_offset = dst_offset;
    if (rows == 1 || (src_pitch == row_bytes && dst_pitch == row_bytes)) {
      w.length = rows * row_bytes;
    } else {
      w.pages = static_cast<uint32_t>(rows);
      w.length = row_bytes;
      w.src_stride = src_pitch;
      w.dst_stride = dst_pitch;
    }
    return w;
  }

  void emit_inference_write(Schedule& s, uint32_t trainer, const Destination& d, uint32_t region, WriteOp w,
                            std::vector<WriteOp>& out) {
    w.target = target_id(s, trainer, Target{Target::Kind::kInference, d.rank, region});
    w.domain = pick_domain(trainer, iload_, d.rank, w.length * w.pages);
    s.inference[d.rank].data_imms += imm_count(w, D_);
    s.inference[d.rank].bytes += w.length * w.pages;
    out.push_back(w);
  }

  void emit(Schedule& s, const Unit& u) {
    const UniquePiece& p = ix_.pieces[u.piece];
    const SourceInfo& si = src(u);
    const uint64_t es_src = element_size(si.dtype), es = element_size(p.dtype);
    TrainerPlan& tp = s.trainers[u.owner];
    PrepareTask task;
    task.group = si.group;
    task.box = u.box;
    task.dtype = p.dtype;
    uint64_t src_offset = 0, src_pitch = u.box.cols() * es;
    task.writes.reserve(p.destinations.size());
    if (p.dtype == DType::kFp8E4m3) task.scale_writes.reserve(p.destinations.size());
    if (u.staged) {
      emit_staged(s, u, tp, task);
    } else {
      task.source = PrepareTask::Source::kShard;
      task.index = u.owner_shard;
      const TrainerShard& sh = ix_.trainers[u.owner]->shards[u.owner_shard];
      task.direct = p.dtype == si.dtype && (u.box.cols() == sh.box.cols() || u.box.rows() == 1);
      if (task.direct) {
        src_offset = sh.offset + ((u.box.r0 - sh.box.r0) * sh.box.cols() + (u.box.c0 - sh.box.c0)) * es_src;
        src_pitch = sh.box.cols() * es_src;
      }
    }
    for (const Destination& d : p.destinations) {
      const uint64_t drow = d.dst_row + (u.box.r0 - p.box.r0), dcol = d.dst_col + (u.box.c0 - p.box.c0);
      emit_inference_write(s, u.owner, d, d.region,
                           strided(u.box.rows(), u.box.cols() * es, src_offset, src_pitch,
                                   d.offset + (drow * d.cols + dcol) * es, d.cols * es),
                           task.writes);
      if (p.dtype != DType::kFp8E4m3) continue;
      const uint64_t nbc = blocks(u.box.cols()), tsc = blocks(d.cols);
      emit_inference_write(s, u.owner, d, d.scale_region,
                           strided(blocks(u.box.rows()), nbc * 4, task.scale_offset(), nbc * 4,
                                   d.scale_offset + ((drow / kFp8Block) * tsc + dcol / kFp8Block) * 4, tsc * 4),
                           task.scale_writes);
    }
    (void)es_src;
    tp.tasks.push_back(std::move(task));
  }

  void emit_staged(Schedule& s, const Unit& u, TrainerPlan& tp, PrepareTask& task) {
    const SourceInfo& si = src(u);
    const uint64_t es = element_size(si.dtype);
    StagedUnit su;
    su.group = si.group;
    su.source_dtype = si.dtype;
    su.box = u.box;
    su.staging_offset = tp.staging_bytes;
    tp.staging_bytes += (u.box.elements() * es + 63) & ~uint64_t{63};
    for (uint32_t k = u.parts_begin; k < u.parts_end; ++k) {
      const Part& part = parts_[k];
      if (part.local) {
        su.local_parts.push_back({part.from.shard, part.part});
        continue;
      }
      const Owner c = part.from;
      const uint64_t bytes = part.part.elements() * es;
      const TrainerShard& sh = ix_.trainers[c.rank]->shards[c.shard];
      const Box& b = sh.box;
      WriteOp w = strided(part.part.rows(), part.part.cols() * es,
                          sh.offset + ((part.part.r0 - b.r0) * b.cols() + (part.part.c0 - b.c0)) * es, b.cols() * es,
                          su.staging_offset + ((part.part.r0 - u.box.r0) * u.box.cols() + (part.part.c0 - u.box.c0)) * es,
                          u.box.cols() * es);
      w.target = target_id(s, c.rank, Target{Target::Kind::kTrainerStaging, u.owner, 0});
      w.domain = pick_domain(c.rank, tload_, u.owner, bytes);
      s.trainers[u.owner].gather_imms[si.group] += imm_count(w, D_);
      s.trainers[c.rank].contributions.push_back(Contribution{si.group, c.shard, w});
    }
    task.source = PrepareTask::Source::kStaging;
    task.index = static_cast<uint32_t>(tp.staged.size());
    tp.staged.push_back(std::move(su));
  }

  Index& ix_;
  const PlanOptions& o_;
  const uint32_t D_;
  std::vector<Unit> units_;
  std::vector<Part> parts_;
  std::vector<uint64_t> load_;
  std::vector<uint64_t> tload_, iload_;
  std::vector<std::unordered_map<uint64_t, uint32_t>> target_ids_;
  std::vector<uint32_t> flat_targets_;
  uint64_t regions_ = 1, slots_ = 0;
};

}  // namespace

Result<Schedule> plan_schedule(const std::vector<TrainerMetadata>& trainers, const std::vector<InferenceMetadata>& inference,
                               const PlanOptions& options) {
  Result<planner::Index> ix = planner::build_index(trainers, inference, options);
  if (!ix.ok()) return ix.status();
  return Planner(*ix, options).run();
}

}  // namespace fabric_lib::weights

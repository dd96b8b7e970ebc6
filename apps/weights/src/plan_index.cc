#include "plan_index.h"

#include <algorithm>
#include <set>

namespace fabric_lib::weights::planner {
namespace {

// At most 2^48 elements per tensor (Kimi-K2's largest has 2^30): keeps every size product in range.
constexpr uint64_t kMaxElements = 1ull << 48;

Status bad(std::string m) { return invalid_argument("weights metadata: " + std::move(m)); }

std::string shape_str(const std::vector<uint64_t>& s) {
  std::string o = "[";
  for (size_t i = 0; i < s.size(); ++i) o += (i ? ", " : "") + std::to_string(s[i]);
  return o + "]";
}

// Cuts [0, extent] at every box edge and finds which box covers each grid cell. Fails with a
// description of the first cell that two boxes cover (overlap) or none covers (hole).
struct Grid {
  std::vector<uint64_t> row_cuts, col_cuts;
  std::vector<uint32_t> cell;  // box index per cell
};
Result<Grid> tile(const std::vector<Box>& boxes, uint64_t rows, uint64_t cols) {
  Grid g;
  g.row_cuts = {0, rows};
  g.col_cuts = {0, cols};
  for (const Box& b : boxes) {
    g.row_cuts.push_back(b.r0);
    g.row_cuts.push_back(b.r1);
    g.col_cuts.push_back(b.c0);
    g.col_cuts.push_back(b.c1);
  }
  for (auto* c : {&g.row_cuts, &g.col_cuts}) {
    std::sort(c->begin(), c->end());
    c->erase(std::unique(c->begin(), c->end()), c->end());
  }
  const size_t nr = g.row_cuts.size() - 1, nc = g.col_cuts.size() - 1;
  constexpr uint32_t kNone = UINT32_MAX;
  g.cell.assign(nr * nc, kNone);
  for (uint32_t i = 0; i < boxes.size(); ++i) {
    const Box& b = boxes[i];
    const size_t r0 = std::lower_bound(g.row_cuts.begin(), g.row_cuts.end(), b.r0) - g.row_cuts.begin();
    const size_t r1 = std::lower_bound(g.row_cuts.begin(), g.row_cuts.end(), b.r1) - g.row_cuts.begin();
    const size_t c0 = std::lower_bound(g.col_cuts.begin(), g.col_cuts.end(), b.c0) - g.col_cuts.begin();
    const size_t c1 = std::lower_bound(g.col_cuts.begin(), g.col_cuts.end(), b.c1) - g.col_cuts.begin();
    for (size_t r = r0; r < r1; ++r) {
      for (size_t c = c0; c < c1; ++c) {
        uint32_t& slot = g.cell[r * nc + c];
        if (slot != kNone) {
          return Status(ErrorCode::kInvalidArgument, "boxes " + to_string(boxes[slot]) + " and " + to_string(b) + " overlap");
        }
        slot = i;
      }
    }
  }
  for (size_t r = 0; r < nr; ++r) {
    for (size_t c = 0; c < nc; ++c) {
      if (g.cell[r * nc + c] == kNone) {
        const Box hole{g.row_cuts[r], g.row_cuts[r + 1], g.col_cuts[c], g.col_cuts[c + 1]};
        return Status(ErrorCode::kInvalidArgument, "nothing covers " + to_string(hole));
      }
    }
  }
  return g;
}

uint32_t group_of(const std::string& name, const PlanOptions& o, bool& found) {
  for (uint32_t g = 0; g < o.groups.size(); ++g) {
    for (const std::string& p : o.groups[g].patterns) {
      if (name.find(p) != std::string::npos) return found = true, g;
    }
  }
  for (uint32_t g = 0; g < o.groups.size(); ++g) {
    if (o.groups[g].patterns.empty()) return found = true, g;
  }
  found = false;
  return 0;
}

template <typename M>
Status check_ranks(std::vector<M>& v, const char* role) {
  std::sort(v.begin(), v.end(), [](const M& a, const M& b) { return a.rank < b.rank; });
  for (uint32_t i = 0; i < v.size(); ++i) {
    if (v[i].rank != i) return bad(std::string(role) + " ranks are not 0.." + std::to_string(v.size() - 1) + " (rank " + std::to_string(v[i].rank) + " at position " + std::to_string(i) + ")");
    if (v[i].world != v.size()) return bad(std::string(role) + " rank " + std::to_string(i) + " says world " + std::to_string(v[i].world) + ", but " + std::to_string(v.size()) + " ranks reported");
    if (v[i].address.empty()) return bad(std::string(role) + " rank " + std::to_string(i) + " sent no engine address");
  }
  return ok_status();
}

Status index_trainers(Index& ix, const PlanOptions& o) {
  std::map<std::string, uint32_t> ids;  // sorted names -> source id
  struct Entry { uint32_t rank, shard; };
  std::map<std::string, std::vector<Entry>> held;
  for (const TrainerMetadata& t : ix.trainers) {
    std::set<std::string> seen;
    for (uint32_t s = 0; s < t.shards.size(); ++s) {
      const TrainerShard& sh = t.shards[s];
      const std::string where = "trainer rank " + std::to_string(t.rank) + " parameter '" + sh.name + "'";
      if (sh.name.empty()) return bad("trainer rank " + std::to_string(t.rank) + " shard " + std::to_string(s) + " has no name");
      if (!seen.insert(sh.name).second) return bad(where + " is listed twice");
      if (sh.global_shape.empty() || sh.global_shape.size() > 8) return bad(where + ": shape must have 1..8 dimensions");
      uint64_t elements = 1;
      for (uint64_t d : sh.global_shape) {
        if (d == 0 || d > kMaxElements || elements > kMaxElements / d) return bad(where + ": shape " + shape_str(sh.global_shape) + " out of range");
        elements *= d;
      }
      if (sh.dtype != DType::kBf16 && sh.dtype != DType::kF32) return bad(where + ": source dtype must be bf16 or f32, not " + dtype_name(sh.dtype));
      const View2d v = view_2d(sh.global_shape);
      if (!sh.box.empty() && !Box{0, v.rows, 0, v.cols}.contains(sh.box)) return bad(where + ": shard " + to_string(sh.box) + " outside its shape " + shape_str(sh.global_shape));
      if (sh.box.empty()) continue;  // a trailing FSDP rank without rows
      held[sh.name].push_back({t.rank, s});
    }
  }
  for (auto& [name, entries] : held) {
    SourceInfo si;
    si.name = name;
    const TrainerShard& first = ix.trainers[entries[0].rank].shards[entries[0].shard];
    si.shape = first.global_shape;
    si.view = view_2d(si.shape);
    si.dtype = first.dtype;
    std::map<Box, std::vector<Owner>> boxes;
    for (const Entry& e : entries) {
      const TrainerShard& sh = ix.trainers[e.rank].shards[e.shard];
      if (sh.global_shape != si.shape) return bad("parameter '" + name + "': trainer rank " + std::to_string(e.rank) + " says shape " + shape_str(sh.global_shape) + ", trainer rank " + std::to_string(entries[0].rank) + " says " + shape_str(si.shape));
      if (sh.dtype != si.dtype) return bad("parameter '" + name + "': trainer rank " + std::to_string(e.rank) + " says dtype " + dtype_name(sh.dtype) + ", trainer rank " + std::to_string(entries[0].rank) + " says " + dtype_name(si.dtype));
      boxes[sh.box].push_back({e.rank, e.shard});
    }
    for (auto& [b, owners] : boxes) {
      si.boxes.push_back(b);
      si.owners.push_back(std::move(owners));
    }
    Result<Grid> g = tile(si.boxes, si.view.rows, si.view.cols);
    if (!g.ok()) return bad("parameter '" + name + "' " + shape_str(si.shape) + ": trainer shards do not tile it: " + g.status().message());
    si.row_cuts = std::move(g->row_cuts);
    si.col_cuts = std::move(g->col_cuts);
    si.cell_box = std::move(g->cell);
    bool found = false;
    si.group = group_of(name, o, found);
    if (!found) return bad("parameter '" + name + "' matches no parameter group and there is no catch-all group");
    ix.by_name.emplace(name, static_cast<uint32_t>(ix.sources.size()));
    ix.sources.push_back(std::move(si));
  }
  return ok_status();
}

Status check_fp8_piece(const InferenceTensor& t, const DestPiece& p, const std::string& where) {
  const uint64_t r_end = p.dst_row + p.src.rows(), c_end = p.dst_col + p.src.cols();
  const bool ok = p.dst_row % kFp8Block == 0 && p.dst_col % kFp8Block == 0 &&
                  (r_end % kFp8Block == 0 || r_end == t.rows) && (c_end % kFp8Block == 0 || c_end == t.cols);
  if (!ok) return bad(where + ": fp8 piece at rows [" + std::to_string(p.dst_row) + "," + std::to_string(r_end) + ") cols [" + std::to_string(p.dst_col) + "," + std::to_string(c_end) + ") is off the 128x128 block grid");
  return ok_status();
}

Status index_inference(Index& ix) {
  std::map<std::tuple<uint32_t, Box, DType>, size_t> unique;
  for (const InferenceMetadata& m : ix.inference) {
    const std::string rank = "inference rank " + std::to_string(m.rank);
    for (size_t i = 0; i < m.regions.size(); ++i) {
      const MrDesc& d = m.regions[i];
      if (d.empty() || !has_access(d.access(), Access::kRemoteWrite)) return bad(rank + " region " + std::to_string(i) + " is empty or not remote-writable");
      if (d.num_domains() != ix.domains) return bad(rank + " region " + std::to_string(i) + " has " + std::to_string(d.num_domains()) + " domains, the engines " + std::to_string(ix.domains));
    }
    std::set<std::string> seen;
    for (uint32_t ti = 0; ti < m.tensors.size(); ++ti) {
      const InferenceTensor& t = m.tensors[ti];
      const std::string where = rank + " tensor '" + t.name + "'";
      if (!seen.insert(t.name).second) return bad(where + " is listed twice");
      if (t.rows == 0 || t.cols == 0 || t.rows > kMaxElements || t.cols > kMaxElements / t.rows) return bad(where + ": bad size " + std::to_string(t.rows) + "x" + std::to_string(t.cols));
      if (!is_valid_dtype(static_cast<uint8_t>(t.dtype))) return bad(where + ": bad dtype");
      auto in_region = [&](uint32_t region, uint64_t off, uint64_t len, const char* what) -> Status {
        if (region >= m.regions.size()) return bad(where + ": " + what + " region " + std::to_string(region) + " does not exist (" + std::to_string(m.regions.size()) + " registered)");
        if (off > m.regions[region].length() || len > m.regions[region].length() - off) return bad(where + ": " + what + " bytes [" + std::to_string(off) + ", +" + std::to_string(len) + ") outside region " + std::to_string(region) + " of " + std::to_string(m.regions[region].length()) + " bytes");
        return ok_status();
      };
      FABRIC_LIB_RETURN_IF_ERROR(in_region(t.region, t.offset, t.bytes(), "data"));
      if (t.dtype == DType::kFp8E4m3) FABRIC_LIB_RETURN_IF_ERROR(in_region(t.scale_region, t.scale_offset, t.scale_bytes(), "scale"));
      if (t.pieces.empty()) return bad(where + " has no pieces");
      std::vector<Box> rects;
      for (const DestPiece& p : t.pieces) {
        const std::string pw = where + " piece from '" + p.source + "'";
        auto it = ix.by_name.find(p.source);
        if (it == ix.by_name.end()) return bad(pw + ": no trainer holds parameter '" + p.source + "'");
        SourceInfo& si = ix.sources[it->second];
        if (p.src.empty() || !Box{0, si.view.rows, 0, si.view.cols}.contains(p.src)) return bad(pw + ": source box " + to_string(p.src) + " outside its shape " + shape_str(si.shape));
        const Box rect{p.dst_row, p.dst_row + p.src.rows(), p.dst_col, p.dst_col + p.src.cols()};
        if (!Box{0, t.rows, 0, t.cols}.contains(rect)) return bad(pw + ": lands at " + to_string(rect) + ", outside the tensor's " + std::to_string(t.rows) + "x" + std::to_string(t.cols));
        if (t.dtype == DType::kFp8E4m3) FABRIC_LIB_RETURN_IF_ERROR(check_fp8_piece(t, p, pw));
        rects.push_back(rect);
        si.used = true;
        auto [u, inserted] = unique.try_emplace({it->second, p.src, t.dtype}, ix.pieces.size());
        if (inserted) ix.pieces.push_back(UniquePiece{it->second, p.src, t.dtype, {}});
        ix.pieces[u->second].destinations.push_back({m.rank, ti, p.dst_row, p.dst_col});
      }
      Result<Grid> g = tile(rects, t.rows, t.cols);
      if (!g.ok()) return bad(where + ": pieces do not tile it: " + g.status().message());
    }
  }
  // Canonical order: by (source name, box, dtype), independent of arrival order.
  std::vector<UniquePiece> sorted;
  sorted.reserve(ix.pieces.size());
  for (auto& [key, i] : unique) sorted.push_back(std::move(ix.pieces[i]));
  ix.pieces = std::move(sorted);
  return ok_status();
}

}  // namespace

Result<Index> build_index(std::vector<TrainerMetadata> trainers, std::vector<InferenceMetadata> inference,
                          const PlanOptions& options) {
  if (trainers.empty() || inference.empty()) return bad("need at least one trainer and one inference rank");
  if (options.groups.empty() || options.groups.size() > 16) return bad("plan options need 1..16 parameter groups");
  if (options.max_task_bytes < 4096) return bad("plan options: max_task_bytes below 4096");
  Index ix;
  ix.trainers = std::move(trainers);
  ix.inference = std::move(inference);
  FABRIC_LIB_RETURN_IF_ERROR(check_ranks(ix.trainers, "trainer"));
  FABRIC_LIB_RETURN_IF_ERROR(check_ranks(ix.inference, "inference"));
  ix.domains = ix.trainers[0].domains;
  if (ix.domains == 0 || ix.domains > kMaxDomainsPerGroup) return bad("trainer rank 0: bad domain count " + std::to_string(ix.domains));
  for (const auto& t : ix.trainers) {
    if (t.domains != ix.domains) return bad("trainer rank " + std::to_string(t.rank) + " has " + std::to_string(t.domains) + " domains, trainer rank 0 " + std::to_string(ix.domains));
  }
  for (const auto& m : ix.inference) {
    if (m.domains != ix.domains) return bad("inference rank " + std::to_string(m.rank) + " has " + std::to_string(m.domains) + " domains, trainer rank 0 " + std::to_string(ix.domains));
  }
  FABRIC_LIB_RETURN_IF_ERROR(index_trainers(ix, options));
  FABRIC_LIB_RETURN_IF_ERROR(index_inference(ix));
  if (!options.allow_unused_sources) {
    for (const SourceInfo& s : ix.sources) {
      if (!s.used) return bad("trainer parameter '" + s.name + "' is not used by any inference tensor (check the name mapping)");
    }
  }
  return ix;
}

}  // namespace fabric_lib::weights::planner

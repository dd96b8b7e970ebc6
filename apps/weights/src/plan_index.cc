#include "plan_index.h"

#include <algorithm>
#include <set>
#include <string_view>
#include <unordered_set>

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

// The common case, checked without a grid: full-width pieces stacked row after row, in order.
bool stacked_rows(const std::vector<Box>& rects, uint64_t rows, uint64_t cols) {
  uint64_t next = 0;
  for (const Box& b : rects) {
    if (b.c0 != 0 || b.c1 != cols || b.r0 != next) return false;
    next = b.r1;
  }
  return next == rows;
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
Status check_ranks(const std::vector<M>& in, std::vector<const M*>& out, const char* role) {
  for (const M& m : in) out.push_back(&m);
  std::sort(out.begin(), out.end(), [](const M* a, const M* b) { return a->rank < b->rank; });
  struct View {
    const std::vector<const M*>& p;
    const M& operator[](size_t i) const { return *p[i]; }
    size_t size() const { return p.size(); }
  } v{out};
  for (uint32_t i = 0; i < v.size(); ++i) {
    if (v[i].rank != i) return bad(std::string(role) + " ranks are not 0.." + std::to_string(v.size() - 1) + " (rank " + std::to_string(v[i].rank) + " at position " + std::to_string(i) + ")");
    if (v[i].world != v.size()) return bad(std::string(role) + " rank " + std::to_string(i) + " says world " + std::to_string(v[i].world) + ", but " + std::to_string(v.size()) + " ranks reported");
    if (v[i].address.empty()) return bad(std::string(role) + " rank " + std::to_string(i) + " sent no engine address");
  }
  return ok_status();
}

Status index_trainers(Index& ix, const PlanOptions& o) {
  struct Entry { uint32_t rank, shard; };
  // Names -> entries, hashed (1M+ shards at scale), sorted once at the end for determinism.
  std::unordered_map<std::string_view, uint32_t> ids;
  std::vector<std::vector<Entry>> entries_of;
  std::vector<uint32_t> last_rank;  // duplicate detection: the rank that last listed the name
  // Ranks of one FSDP group list the same names in the same order: try the previous rank's id
  // for the same position before hashing (1M+ shards at scale).
  const TrainerMetadata* prev = nullptr;
  std::vector<uint32_t> prev_ids, cur_ids;
  for (const TrainerMetadata* tp : ix.trainers) {
    const TrainerMetadata& t = *tp;
    cur_ids.assign(t.shards.size(), UINT32_MAX);
    for (uint32_t s = 0; s < t.shards.size(); ++s) {
      const TrainerShard& sh = t.shards[s];
      auto where = [&] { return "trainer rank " + std::to_string(t.rank) + " parameter '" + sh.name + "'"; };
      if (sh.name.empty()) return bad("trainer rank " + std::to_string(t.rank) + " shard " + std::to_string(s) + " has no name");
      if (sh.global_shape.empty() || sh.global_shape.size() > 8) return bad(where() + ": shape must have 1..8 dimensions");
      uint64_t elements = 1;
      for (uint64_t d : sh.global_shape) {
        if (d == 0 || d > kMaxElements || elements > kMaxElements / d) return bad(where() + ": shape " + shape_str(sh.global_shape) + " out of range");
        elements *= d;
      }
      if (sh.dtype != DType::kBf16 && sh.dtype != DType::kF32) return bad(where() + ": source dtype must be bf16 or f32, not " + dtype_name(sh.dtype));
      const View2d v = view_2d(sh.global_shape);
      if (!sh.box.empty() && !Box{0, v.rows, 0, v.cols}.contains(sh.box)) return bad(where() + ": shard " + to_string(sh.box) + " outside its shape " + shape_str(sh.global_shape));
      uint32_t id;
      if (prev && s < prev_ids.size() && prev->shards[s].name == sh.name) {
        id = prev_ids[s];
      } else {
        auto [it, inserted] = ids.try_emplace(sh.name, static_cast<uint32_t>(entries_of.size()));
        if (inserted) {
          entries_of.emplace_back();
          last_rank.push_back(UINT32_MAX);
        }
        id = it->second;
      }
      cur_ids[s] = id;
      if (last_rank[id] == t.rank) return bad(where() + " is listed twice");
      last_rank[id] = t.rank;
      if (sh.box.empty()) continue;  // a trailing FSDP rank without rows
      entries_of[id].push_back({t.rank, s});
    }
    prev = &t;
    std::swap(prev_ids, cur_ids);
  }
  std::vector<std::pair<std::string_view, uint32_t>> names(ids.begin(), ids.end());
  std::sort(names.begin(), names.end());
  for (const auto& [name_view, id] : names) {
    const std::vector<Entry>& entries = entries_of[id];
    if (entries.empty()) continue;
    const std::string name(name_view);
    SourceInfo si;
    si.name = name;
    const TrainerShard& first = ix.trainers[entries[0].rank]->shards[entries[0].shard];
    si.shape = first.global_shape;
    si.view = view_2d(si.shape);
    si.dtype = first.dtype;
    struct Held {
      Box box;
      Owner owner;
    };
    std::vector<Held> held;
    held.reserve(entries.size());
    for (const Entry& e : entries) {
      const TrainerShard& sh = ix.trainers[e.rank]->shards[e.shard];
      if (sh.global_shape != si.shape) return bad("parameter '" + name + "': trainer rank " + std::to_string(e.rank) + " says shape " + shape_str(sh.global_shape) + ", trainer rank " + std::to_string(entries[0].rank) + " says " + shape_str(si.shape));
      if (sh.dtype != si.dtype) return bad("parameter '" + name + "': trainer rank " + std::to_string(e.rank) + " says dtype " + dtype_name(sh.dtype) + ", trainer rank " + std::to_string(entries[0].rank) + " says " + dtype_name(si.dtype));
      held.push_back({sh.box, {e.rank, e.shard}});
    }
    // Distinct boxes in order, each with its owners by rank (entries are in rank order already).
    std::stable_sort(held.begin(), held.end(), [](const Held& a, const Held& b) { return a.box < b.box; });
    si.owner_list.reserve(held.size());
    for (const Held& h : held) {
      if (si.boxes.empty() || si.boxes.back() != h.box) {
        si.boxes.push_back(h.box);
        si.owner_begin.push_back(static_cast<uint32_t>(si.owner_list.size()));
      }
      si.owner_list.push_back(h.owner);
    }
    si.owner_begin.push_back(static_cast<uint32_t>(si.owner_list.size()));
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

struct PieceKey {
  uint32_t source;
  Box box;
  DType dtype;
  bool operator==(const PieceKey&) const = default;
};
struct PieceKeyHash {
  size_t operator()(const PieceKey& k) const {
    uint64_t h = k.source * 0x9e3779b97f4a7c15ull ^ static_cast<uint64_t>(k.dtype);
    for (uint64_t x : {k.box.r0, k.box.r1, k.box.c0, k.box.c1}) h = (h ^ x) * 0x100000001b3ull + (h >> 29);
    return h;
  }
};

template <typename Where>  // builds the error's prefix only when there is an error
Status check_fp8_piece(const InferenceTensor& t, const DestPiece& p, const Where& where) {
  const uint64_t r_end = p.dst_row + p.src.rows(), c_end = p.dst_col + p.src.cols();
  const bool ok = p.dst_row % kFp8Block == 0 && p.dst_col % kFp8Block == 0 &&
                  (r_end % kFp8Block == 0 || r_end == t.rows) && (c_end % kFp8Block == 0 || c_end == t.cols);
  if (!ok) return bad(where() + ": fp8 piece at rows [" + std::to_string(p.dst_row) + "," + std::to_string(r_end) + ") cols [" + std::to_string(p.dst_col) + "," + std::to_string(c_end) + ") is off the 128x128 block grid");
  return ok_status();
}

Status index_inference(Index& ix) {
  std::unordered_map<PieceKey, size_t, PieceKeyHash> unique;
  for (const InferenceMetadata* mp : ix.inference) {
    const InferenceMetadata& m = *mp;
    const std::string rank = "inference rank " + std::to_string(m.rank);
    for (size_t i = 0; i < m.regions.size(); ++i) {
      const MrDesc& d = m.regions[i];
      if (d.empty() || !has_access(d.access(), Access::kRemoteWrite)) return bad(rank + " region " + std::to_string(i) + " is empty or not remote-writable");
      if (d.num_domains() != ix.domains) return bad(rank + " region " + std::to_string(i) + " has " + std::to_string(d.num_domains()) + " domains, the engines " + std::to_string(ix.domains));
    }
    std::unordered_set<std::string_view> seen;
    for (uint32_t ti = 0; ti < m.tensors.size(); ++ti) {
      const InferenceTensor& t = m.tensors[ti];
      auto where = [&] { return rank + " tensor '" + t.name + "'"; };
      if (!seen.insert(t.name).second) return bad(where() + " is listed twice");
      if (t.rows == 0 || t.cols == 0 || t.rows > kMaxElements || t.cols > kMaxElements / t.rows) return bad(where() + ": bad size " + std::to_string(t.rows) + "x" + std::to_string(t.cols));
      if (!is_valid_dtype(static_cast<uint8_t>(t.dtype))) return bad(where() + ": bad dtype");
      auto in_region = [&](uint32_t region, uint64_t off, uint64_t len, const char* what) -> Status {
        if (region >= m.regions.size()) return bad(where() + ": " + what + " region " + std::to_string(region) + " does not exist (" + std::to_string(m.regions.size()) + " registered)");
        if (off > m.regions[region].length() || len > m.regions[region].length() - off) return bad(where() + ": " + what + " bytes [" + std::to_string(off) + ", +" + std::to_string(len) + ") outside region " + std::to_string(region) + " of " + std::to_string(m.regions[region].length()) + " bytes");
        return ok_status();
      };
      FABRIC_LIB_RETURN_IF_ERROR(in_region(t.region, t.offset, t.bytes(), "data"));
      if (t.dtype == DType::kFp8E4m3) FABRIC_LIB_RETURN_IF_ERROR(in_region(t.scale_region, t.scale_offset, t.scale_bytes(), "scale"));
      if (t.pieces.empty()) return bad(where() + " has no pieces");
      std::vector<Box> rects;
      for (const DestPiece& p : t.pieces) {
        auto pw = [&] { return where() + " piece from '" + p.source + "'"; };
        auto it = ix.by_name.find(p.source);
        if (it == ix.by_name.end()) return bad(pw() + ": no trainer holds parameter '" + p.source + "'");
        SourceInfo& si = ix.sources[it->second];
        if (p.src.empty() || !Box{0, si.view.rows, 0, si.view.cols}.contains(p.src)) return bad(pw() + ": source box " + to_string(p.src) + " outside its shape " + shape_str(si.shape));
        const Box rect{p.dst_row, p.dst_row + p.src.rows(), p.dst_col, p.dst_col + p.src.cols()};
        if (!Box{0, t.rows, 0, t.cols}.contains(rect)) return bad(pw() + ": lands at " + to_string(rect) + ", outside the tensor's " + std::to_string(t.rows) + "x" + std::to_string(t.cols));
        if (t.dtype == DType::kFp8E4m3) FABRIC_LIB_RETURN_IF_ERROR(check_fp8_piece(t, p, pw));
        rects.push_back(rect);
        si.used = true;
        auto [u, inserted] = unique.try_emplace(PieceKey{it->second, p.src, t.dtype}, ix.pieces.size());
        if (inserted) ix.pieces.push_back(UniquePiece{it->second, p.src, t.dtype, {}});
        ix.pieces[u->second].destinations.push_back({m.rank, ti, p.dst_row, p.dst_col, t.cols, t.offset, t.scale_offset, t.region, t.scale_region});
      }
      if (!stacked_rows(rects, t.rows, t.cols)) {
        Result<Grid> g = tile(rects, t.rows, t.cols);
        if (!g.ok()) return bad(where() + ": pieces do not tile it: " + g.status().message());
      }
    }
  }
  // Canonical order: by (source name, box, dtype), independent of arrival order (destinations
  // stay in rank order: ranks were sorted first).
  std::sort(ix.pieces.begin(), ix.pieces.end(), [](const UniquePiece& a, const UniquePiece& b) {
    return std::tie(a.source, a.box, a.dtype) < std::tie(b.source, b.box, b.dtype);
  });
  return ok_status();
}

}  // namespace

Result<Index> build_index(const std::vector<TrainerMetadata>& trainers, const std::vector<InferenceMetadata>& inference,
                          const PlanOptions& options) {
  if (trainers.empty() || inference.empty()) return bad("need at least one trainer and one inference rank");
  if (options.groups.empty() || options.groups.size() > 16) return bad("plan options need 1..16 parameter groups");
  if (options.max_task_bytes < 4096) return bad("plan options: max_task_bytes below 4096");
  Index ix;
  FABRIC_LIB_RETURN_IF_ERROR(check_ranks(trainers, ix.trainers, "trainer"));
  FABRIC_LIB_RETURN_IF_ERROR(check_ranks(inference, ix.inference, "inference"));
  ix.domains = ix.trainers[0]->domains;
  if (ix.domains == 0 || ix.domains > kMaxDomainsPerGroup) return bad("trainer rank 0: bad domain count " + std::to_string(ix.domains));
  for (const TrainerMetadata* tp : ix.trainers) {
    const TrainerMetadata& t = *tp;
    if (t.domains != ix.domains) return bad("trainer rank " + std::to_string(t.rank) + " has " + std::to_string(t.domains) + " domains, trainer rank 0 " + std::to_string(ix.domains));
  }
  for (const InferenceMetadata* mp : ix.inference) {
    const InferenceMetadata& m = *mp;
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

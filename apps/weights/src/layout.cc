#include "fabric_lib/weights/layout.h"

#include <algorithm>

namespace fabric_lib::weights {

RowRange fsdp_rows(uint64_t dim0, uint64_t rows_per_dim0, uint32_t n, uint32_t rank) {
  if (n == 0 || rank >= n) return {};
  const uint64_t chunk = (dim0 + n - 1) / n;
  const uint64_t b = std::min<uint64_t>(dim0, chunk * rank), e = std::min<uint64_t>(dim0, chunk * (rank + 1));
  return {b * rows_per_dim0, e * rows_per_dim0};
}

Box whole(const std::vector<uint64_t>& shape) {
  const View2d v = view_2d(shape);
  return Box{0, v.rows, 0, v.cols};
}

Box expert_rows(const std::vector<uint64_t>& stacked_shape, uint64_t expert) {
  const View2d v = view_2d(stacked_shape);
  if (stacked_shape.empty() || stacked_shape[0] == 0) return {};
  const uint64_t per = v.rows / stacked_shape[0];
  return Box{expert * per, (expert + 1) * per, 0, v.cols};
}

namespace {
Result<Box> split(const std::string& name, const Box& b, TpSplit s, uint32_t n, uint32_t i) {
  if (n == 0 || i >= n) return invalid_argument("'" + name + "': TP rank " + std::to_string(i) + " of " + std::to_string(n));
  if (s == TpSplit::kReplicated || n == 1) return b;
  const uint64_t extent = s == TpSplit::kRows ? b.rows() : b.cols();
  if (extent % n != 0) {
    return invalid_argument("'" + name + "': " + (s == TpSplit::kRows ? "rows " : "cols ") + std::to_string(extent) +
                            " do not split evenly over TP " + std::to_string(n));
  }
  const uint64_t part = extent / n;
  Box r = b;
  if (s == TpSplit::kRows) {
    r.r0 = b.r0 + part * i;
    r.r1 = r.r0 + part;
  } else {
    r.c0 = b.c0 + part * i;
    r.c1 = r.c0 + part;
  }
  return r;
}
}  // namespace

Result<Box> trainer_box(const std::string& name, const std::vector<uint64_t>& shape, const TrainerPlacement& p) {
  if (shape.empty()) return invalid_argument("'" + name + "': empty shape");
  Result<Box> tp = split(name, whole(shape), p.tp_split, p.tp_size, p.tp_rank);
  if (!tp.ok()) return tp.status();
  if (p.fsdp_size == 0 || p.fsdp_rank >= p.fsdp_size) {
    return invalid_argument("'" + name + "': FSDP rank " + std::to_string(p.fsdp_rank) + " of " + std::to_string(p.fsdp_size));
  }
  Box b = *tp;
  // FSDP chunks dim 0 of the (TP-local) tensor: in the 2-D view, groups of rows_per_dim0 rows.
  const View2d v = view_2d(shape);
  const uint64_t rows_per_dim0 = shape.size() == 1 ? 1 : v.rows / shape[0];
  if (b.rows() % rows_per_dim0 != 0) return invalid_argument("'" + name + "': TP split inside dim 0 of a >2-D tensor");
  const RowRange rr = fsdp_rows(b.rows() / rows_per_dim0, rows_per_dim0, p.fsdp_size, p.fsdp_rank);
  const uint64_t r0 = b.r0;
  b.r0 = r0 + rr.begin;
  b.r1 = r0 + rr.end;
  if (b.rows() == 0) return Box{};
  return b;
}

Result<InferenceTensor> tp_tensor(const std::string& name, const std::vector<SourceSlice>& sources, TpSplit s,
                                  uint32_t tp, uint32_t tp_rank, DType dtype) {
  if (sources.empty()) return invalid_argument("'" + name + "': no sources");
  InferenceTensor t;
  t.name = name;
  t.dtype = dtype;
  uint64_t row = 0;
  for (const SourceSlice& src : sources) {
    Result<Box> part = split(name + "' part '" + src.name, src.box, s, tp, tp_rank);
    if (!part.ok()) return part.status();
    if (row == 0) t.cols = part->cols();
    if (part->cols() != t.cols) {
      return invalid_argument("'" + name + "': part '" + src.name + "' has " + std::to_string(part->cols()) +
                              " columns, the first part " + std::to_string(t.cols));
    }
    t.pieces.push_back(DestPiece{src.name, *part, row, 0});
    row += part->rows();
  }
  t.rows = row;
  return t;
}

Result<InferenceTensor> stacked_tensor(const std::string& name, const std::vector<std::vector<SourceSlice>>& experts,
                                       DType dtype) {
  std::vector<SourceSlice> flat;
  for (const auto& e : experts) flat.insert(flat.end(), e.begin(), e.end());
  return tp_tensor(name, flat, TpSplit::kReplicated, 1, 0, dtype);
}

Result<std::vector<uint64_t>> ep_experts(uint64_t num_experts, uint32_t ep, uint32_t rank) {
  if (ep == 0 || rank >= ep || num_experts % ep != 0) {
    return invalid_argument(std::to_string(num_experts) + " experts do not split evenly over EP " + std::to_string(ep));
  }
  std::vector<uint64_t> out;
  const uint64_t per = num_experts / ep;
  for (uint64_t e = rank * per; e < (rank + 1) * per; ++e) out.push_back(e);
  return out;
}

void NameMapping::rename(std::string inference_prefix, std::string trainer_prefix) {
  renames_.emplace_back(std::move(inference_prefix), std::move(trainer_prefix));
}

void NameMapping::fuse(std::string fused_suffix, std::vector<std::string> part_suffixes) {
  fusions_.emplace_back(std::move(fused_suffix), std::move(part_suffixes));
}

std::string NameMapping::trainer_name(const std::string& n) const {
  for (const auto& [from, to] : renames_) {
    if (n.compare(0, from.size(), from) == 0) return to + n.substr(from.size());
  }
  return n;
}

std::vector<std::string> NameMapping::sources_of(const std::string& n) const {
  for (const auto& [fused, parts] : fusions_) {
    if (n.size() >= fused.size() && n.compare(n.size() - fused.size(), fused.size(), fused) == 0) {
      const std::string prefix = n.substr(0, n.size() - fused.size());
      std::vector<std::string> out;
      for (const std::string& p : parts) out.push_back(trainer_name(prefix + p));
      return out;
    }
  }
  return {trainer_name(n)};
}

}  // namespace fabric_lib::weights

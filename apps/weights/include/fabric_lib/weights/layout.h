// Builders for the boxes of types.h: where a trainer's FSDP/TP shard lies, how an inference
// rank's tensor is assembled from source slices (TP splits, fused qkv / gate_up, experts by
// index), and the name mapping from inference names to trainer names. Pure functions; errors
// name the tensor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fabric_lib/weights/types.h"

namespace fabric_lib::weights {

// How a tensor is split across tensor-parallel ranks.
enum class TpSplit : uint8_t {
  kReplicated = 0,  // every rank holds the whole tensor
  kRows = 1,        // column-parallel linear (output features), vocab-parallel embedding: dim-0 split
  kCols = 2,        // row-parallel linear (input features): last-dim split
};

// Where a trainer rank's shard of a parameter lies. PP and EP decide *which* parameters a rank
// holds (its stage's layers, its experts): the caller only describes those. TP (optional) splits
// the 2-D view evenly first; FSDP then chunks the TP-local rows like torch.chunk / FSDP2
// (chunk = ceil(rows / n); trailing ranks may hold fewer rows or none).
struct TrainerPlacement {
  uint32_t fsdp_size = 1, fsdp_rank = 0;
  uint32_t tp_size = 1, tp_rank = 0;
  TpSplit tp_split = TpSplit::kReplicated;
};
// Rows [begin, end) of `rows` that FSDP rank `rank` of `n` holds (dim-0 chunking).
// FSDP chunks dim 0 of the tensor, so for shapes of more than two dimensions the chunk boundary
// is a multiple of the 2-D view's rows per dim-0 index.
struct RowRange {
  uint64_t begin = 0, end = 0;
};
RowRange fsdp_rows(uint64_t dim0, uint64_t rows_per_dim0, uint32_t n, uint32_t rank);
// The shard box of `shape` under `placement`; InvalidArgument when a TP split does not divide.
// An empty box (a trailing FSDP rank with no rows) is a valid answer: such a rank holds nothing.
Result<Box> trainer_box(const std::string& name, const std::vector<uint64_t>& shape, const TrainerPlacement& placement);

// A source slice for the inference builders: `box` of trainer parameter `name` (the whole 2-D
// view for ordinary parameters; one expert's rows of a stacked expert tensor).
struct SourceSlice {
  std::string name;
  Box box;
};
// The whole 2-D view of `shape` as a box.
Box whole(const std::vector<uint64_t>& shape);
// Rows [e * rows_per_expert, (e + 1) * rows_per_expert) of a stacked expert tensor's view.
Box expert_rows(const std::vector<uint64_t>& stacked_shape, uint64_t expert);

// Destination tensor = the row-wise stack of `sources` (one source: a plain parameter; q,k,v:
// fused qkv; gate,up: fused gate_up), each split by `split` over `tp` ranks, rank `tp_rank`'s
// parts stacked in order (what vLLM's QKVParallelLinear / MergedColumnParallelLinear hold).
// kCols needs every source to have the same columns. Region fields are left 0 for the caller.
Result<InferenceTensor> tp_tensor(const std::string& name, const std::vector<SourceSlice>& sources, TpSplit split,
                                  uint32_t tp, uint32_t tp_rank, DType dtype);
// Destination = the row-wise stack of the given experts' tensors (vLLM FusedMoE's w13 / w2 on an
// EP rank): for each expert in `experts`, its `parts` (e.g. gate then up) in order.
Result<InferenceTensor> stacked_tensor(const std::string& name, const std::vector<std::vector<SourceSlice>>& experts,
                                       DType dtype);
// Experts held by EP rank `rank` of `ep` for `num_experts` experts (contiguous, even split).
Result<std::vector<uint64_t>> ep_experts(uint64_t num_experts, uint32_t ep, uint32_t rank);

// Maps inference-side names to trainer-side names. Rules are tried in the order added.
class NameMapping {
 public:
  // Inference names starting with `inference_prefix` correspond to trainer names starting with
  // `trainer_prefix` (e.g. "model.layers." <-> "layers."). The first matching rule wins.
  void rename(std::string inference_prefix, std::string trainer_prefix);
  // An inference name ending in `fused_suffix` (e.g. "qkv_proj.weight") is the row-wise stack of
  // the names with the same prefix ending in `part_suffixes` ("q_proj.weight", ...).
  void fuse(std::string fused_suffix, std::vector<std::string> part_suffixes);

  // The trainer names of an inference name: its parts (for fused names) with the rename applied.
  std::vector<std::string> sources_of(const std::string& inference_name) const;
  // The trainer name of one (unfused) inference name.
  std::string trainer_name(const std::string& inference_name) const;

 private:
  std::vector<std::pair<std::string, std::string>> renames_;
  std::vector<std::pair<std::string, std::vector<std::string>>> fusions_;
};

}  // namespace fabric_lib::weights

// The planner's index of the metadata (internal to the planner): every source parameter with its
// distinct trainer boxes, their owners and the grid the boxes cut the 2-D view into; and every
// inference piece, deduplicated by (source, box, destination dtype).
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "fabric_lib/weights/plan.h"

namespace fabric_lib::weights::planner {

struct Owner {
  uint32_t rank = 0;
  uint32_t shard = 0;  // index into that rank's TrainerMetadata::shards
};

struct SourceInfo {
  std::string name;
  std::vector<uint64_t> shape;
  View2d view;
  DType dtype = DType::kBf16;
  uint32_t group = 0;
  std::vector<Box> boxes;                    // distinct trainer boxes, sorted
  std::vector<Owner> owner_list;             // every box's owners, by box then rank
  std::vector<uint32_t> owner_begin;         // box i's owners: [owner_begin[i], owner_begin[i + 1])
  std::span<const Owner> owners(size_t box) const {
    return {owner_list.data() + owner_begin[box], owner_list.data() + owner_begin[box + 1]};
  }
  std::vector<uint64_t> row_cuts, col_cuts;  // sorted, from 0 to rows / cols
  std::vector<uint32_t> cell_box;            // [ri * (col_cuts.size() - 1) + ci] -> box
  bool used = false;
  uint32_t cell(size_t ri, size_t ci) const { return cell_box[ri * (col_cuts.size() - 1) + ci]; }
};

// One place an inference rank wants a piece.
// The tensor's placement is copied in, so that emitting writes reads the pieces sequentially
// instead of chasing every rank's metadata (10M+ writes at scale).
struct Destination {
  uint32_t rank = 0;
  uint32_t tensor = 0;
  uint64_t dst_row = 0, dst_col = 0;
  uint64_t cols = 0;  // the tensor's
  uint64_t offset = 0, scale_offset = 0;
  uint32_t region = 0, scale_region = 0;
};

// A distinct (source, box, dtype) and every destination that holds it.
struct UniquePiece {
  uint32_t source = 0;
  Box box;
  DType dtype = DType::kBf16;
  std::vector<Destination> destinations;
};

struct Index {
  std::vector<const TrainerMetadata*> trainers;     // by rank (the caller's metadata)
  std::vector<const InferenceMetadata*> inference;  // by rank
  std::vector<SourceInfo> sources;            // by name
  std::unordered_map<std::string, uint32_t> by_name;
  std::vector<UniquePiece> pieces;            // sorted by (source, box, dtype)
  uint32_t domains = 1;
};

// Sorts ranks, validates everything and builds the index. Errors name the rank and parameter.
// The index points into `trainers` and `inference`, which must outlive it.
Result<Index> build_index(const std::vector<TrainerMetadata>& trainers, const std::vector<InferenceMetadata>& inference,
                          const PlanOptions& options);

}  // namespace fabric_lib::weights::planner

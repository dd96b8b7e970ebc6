// Parameter metadata of RL weight transfer: what a trainer rank holds and what an inference rank
// wants, described as boxes of 2-D views of global tensors. Plain data; validation lives in the
// planner (plan.h), which names the offending parameter in every error.
//
// The 2-D view of a tensor of shape [d0, d1, ..., dk]: rows = d0 * ... * d(k-1), cols = dk
// (a 1-D tensor [n] is [n, 1]). FSDP dim-0 shards, TP column/row splits, vocabulary splits and
// expert slices of stacked expert tensors are all boxes of that view (layout.h builds them).
// Every box is stored dense and row-major: element (r, c) of box b sits at
// offset + ((r - b.r0) * b.cols() + (c - b.c0)) * element size.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fabric_lib/fabric_lib.h"

namespace fabric_lib::weights {

// Element types. Values are pinned: they travel in metadata messages.
enum class DType : uint8_t {
  kBf16 = 1,
  kF32 = 2,
  // fp8 e4m3fn (max 448, no infinities) with one f32 scale per 128x128 block of the destination's
  // 2-D view, stored in a separate tensor of ceil(rows/128) x ceil(cols/128) f32 (the layout of
  // DeepSeek-V3 / Kimi-K2 checkpoints' weight_scale_inv): value = fp8 * scale. fp8.h has the rules.
  kFp8E4m3 = 3,
};
inline constexpr uint64_t kFp8Block = 128;

size_t element_size(DType t);            // 2, 4, 1
const char* dtype_name(DType t);         // "bf16", "f32", "fp8_e4m3"
bool is_valid_dtype(uint8_t raw);

// Rows [r0, r1) x cols [c0, c1) of a 2-D view. Intentionally copyable.
struct Box {
  uint64_t r0 = 0, r1 = 0, c0 = 0, c1 = 0;
  uint64_t rows() const { return r1 - r0; }
  uint64_t cols() const { return c1 - c0; }
  uint64_t elements() const { return rows() * cols(); }
  bool empty() const { return r1 <= r0 || c1 <= c0; }
  bool contains(const Box& b) const { return b.r0 >= r0 && b.r1 <= r1 && b.c0 >= c0 && b.c1 <= c1; }
  friend bool operator==(const Box&, const Box&) = default;
  friend auto operator<=>(const Box&, const Box&) = default;
};
Box intersect(const Box& a, const Box& b);  // empty() when they do not overlap
std::string to_string(const Box& b);        // "[r0,r1)x[c0,c1)"

// The 2-D view of `shape`: {rows, cols}. {0, 0} for an empty shape.
struct View2d {
  uint64_t rows = 0, cols = 0;
};
View2d view_2d(const std::vector<uint64_t>& shape);

// --- trainer side ---------------------------------------------------------------------------------

// One parameter shard held by a trainer rank.
struct TrainerShard {
  std::string name;                   // trainer-side parameter name (the mapping's source name)
  std::vector<uint64_t> global_shape;  // of the whole (unsharded) parameter
  DType dtype = DType::kBf16;          // kBf16 or kF32
  Box box;                             // the part of the 2-D view this rank holds
  uint32_t region = 0;                 // index into the rank's own registrations (local only)
  uint64_t offset = 0;                 // byte offset of the shard's first element there
  friend bool operator==(const TrainerShard&, const TrainerShard&) = default;
};

// What a trainer rank tells the controller.
struct TrainerMetadata {
  uint32_t rank = 0;
  uint32_t world = 0;                  // number of trainer ranks
  DomainAddress address;               // its engine's main_address()
  uint32_t domains = 1;                // domains per group of its engine
  std::vector<TrainerShard> shards;
  friend bool operator==(const TrainerMetadata&, const TrainerMetadata&) = default;
};

// --- inference side -------------------------------------------------------------------------------

// One rectangular slice of a source (trainer-side) parameter placed into a destination tensor:
// source element (r, c) of `src` goes to destination element (dst_row + r - src.r0, dst_col + c - src.c0).
struct DestPiece {
  std::string source;
  Box src;
  uint64_t dst_row = 0, dst_col = 0;
  friend bool operator==(const DestPiece&, const DestPiece&) = default;
};

// One destination tensor (the local shard of an inference-side parameter), in registered memory.
// Its pieces must tile its rows x cols exactly. fp8 destinations also name a scale tensor of
// ceil(rows/128) x ceil(cols/128) f32, and their pieces must start on 128-element boundaries and
// end on one or at the tensor's edge (so that every 128x128 block comes from one source).
struct InferenceTensor {
  std::string name;                    // inference-side name (for errors and logs)
  uint64_t rows = 0, cols = 0;         // local 2-D view
  DType dtype = DType::kBf16;          // kBf16, kF32 or kFp8E4m3
  std::vector<DestPiece> pieces;
  uint32_t region = 0;                 // index into InferenceMetadata::regions
  uint64_t offset = 0;                 // byte offset of element (0, 0)
  uint32_t scale_region = 0;           // fp8 only
  uint64_t scale_offset = 0;           // fp8 only
  uint64_t bytes() const { return rows * cols * element_size(dtype); }
  uint64_t scale_bytes() const;        // 0 unless fp8
  friend bool operator==(const InferenceTensor&, const InferenceTensor&) = default;
};

// What an inference rank tells the controller.
struct InferenceMetadata {
  uint32_t rank = 0;
  uint32_t world = 0;                  // number of inference ranks (all instances together)
  DomainAddress address;
  uint32_t domains = 1;
  std::vector<MrDesc> regions;         // remote-writable registrations holding its tensors
  std::vector<InferenceTensor> tensors;
  friend bool operator==(const InferenceMetadata&, const InferenceMetadata&) = default;
};

}  // namespace fabric_lib::weights

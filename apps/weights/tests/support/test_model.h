// A scaled-down model of real shapes for the weights tests: two layers (attention q/k/v/o with
// fused qkv, a dense MLP with fused gate_up, an MoE layer with 4 experts), norms, router,
// embeddings and lm_head; trainer metadata for FSDP over T ranks (HF-style names under "model.")
// and inference metadata for TP ranks with EP for the experts (vLLM-style fused names), in bf16
// or fp8 destinations; deterministic weights per step; and the single-process reference load.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fabric_lib/weights/weights.h"

namespace fabric_lib::weights::testing {

struct ModelParam {
  std::string name;  // trainer-side
  std::vector<uint64_t> shape;
  DType dtype = DType::kBf16;
};

// The trainer-side parameters (sorted by name).
std::vector<ModelParam> model_params();
// The inference-side name mapping the model uses.
NameMapping model_mapping();

// The value of element (r, c) of the 2-D view of `name` at training step `step`, exactly
// representable in the parameter's dtype.
float weight_value(const std::string& name, DType dtype, uint64_t r, uint64_t c, uint64_t step);

// Trainer rank `rank` of `world` (FSDP dim-0 over all ranks): its shards laid out in one region
// (region 0) of arena_bytes, offsets 64-aligned.
struct TrainerLayout {
  std::vector<TrainerShard> shards;
  uint64_t arena_bytes = 0;
};
TrainerLayout trainer_layout(uint32_t rank, uint32_t world);
// Fills the trainer's arena with its shards' values at `step`.
void fill_trainer_arena(const TrainerLayout& layout, uint64_t step, uint8_t* arena);

// Inference rank `rank` of `world` (TP = world for dense tensors, EP = world for experts):
// data in region 0, fp8 scales in region 1.
struct InferenceLayout {
  std::vector<InferenceTensor> tensors;
  uint64_t data_bytes = 0, scale_bytes = 0;
};
InferenceLayout inference_layout(uint32_t rank, uint32_t world, bool fp8);
// The bytes a single-process load of step `step` puts into the rank's two regions (untouched
// bytes keep `fill`).
void reference_load(const InferenceLayout& layout, uint64_t step, uint8_t* data, uint8_t* scales, uint8_t fill);

}  // namespace fabric_lib::weights::testing

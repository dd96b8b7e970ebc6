// The tests' model of an MoE layer, independent of the library's planner: deterministic inputs
// per (seed, step, global token), an expert function with a closed form, and naive reference
// dispatch (what each rank's expert-contiguous output must hold, row for row) and combine.
//
// Inputs depend only on the global token index, so the same global batch split over W ranks
// (rank r holds tokens [r*G/W, (r+1)*G/W)) must give bit-identical combine outputs for every W.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fabric_lib/moe/config.h"

namespace fabric_lib::moe::testing {

// How a step routes its tokens (cycled by step so every run sees each).
enum class Routing : uint8_t {
  kRandom = 0,  // K distinct experts, uniform
  kHot = 1,     // every token to the same K consecutive experts (one rank gets everything)
  kSparse = 2,  // only every fourth expert is ever chosen (most experts get no tokens)
  kSkewed = 3,  // expert 0 always, the rest random (one expert gets every token)
};
Routing routing_of_step(uint64_t step);
const char* routing_name(Routing r);

struct TokenBatch {
  uint32_t tokens = 0;
  std::vector<uint8_t> x;         // tokens * H * in_size
  std::vector<float> scales;      // tokens * S
  std::vector<uint32_t> indices;  // tokens * K
  std::vector<float> weights;     // tokens * K
};

// Global tokens [first, first + count) of `step`.
TokenBatch make_tokens(const MoeConfig& c, uint64_t seed, uint64_t step, uint32_t first, uint32_t count);

// fp32 value of element h of a token (fp8 e4m3fn decoded and scaled per 128, bf16, fp32).
float token_value(const MoeConfig& c, const uint8_t* x, const float* scales, uint32_t h);
float fp8_e4m3_to_float(uint8_t b);
uint16_t to_bf16(float f);
float from_bf16(uint16_t b);

// The expert function: y[h] = value(h) * (1 + (e % 7) / 8), rounded to out_dtype. Written into
// `out` (H * out_size bytes).
void expert_apply(const MoeConfig& c, uint32_t expert, const uint8_t* x, const float* scales, uint8_t* out);

// What rank `rank` must receive, given every rank's batch: per local expert the rows, in source
// order, then the source's token order (k within token).
struct DispatchExpect {
  std::vector<int32_t> counts;     // L
  std::vector<uint32_t> pad_off;   // L
  uint32_t rows = 0;               // padded
  std::vector<uint8_t> x;          // rows * H * in_size (gap rows zero)
  std::vector<float> scales;       // rows * S
  std::vector<uint32_t> expert_of; // rows: local expert of each valid row, UINT32_MAX for gaps
};
DispatchExpect reference_dispatch(const MoeConfig& c, uint32_t rank, const std::vector<TokenBatch>& all);

// Closed form of combine for a batch: out[t] = sum_k w[t][k] * expert_apply(e_k, x_t) in fp32,
// k in order, rounded to out_dtype (the layer is exact because each row's y depends on the token
// only).
std::vector<uint8_t> reference_combine(const MoeConfig& c, const TokenBatch& b);

// Order-independent digest of output rows (global index, bytes): ranks' digests add up to the
// digest of the whole batch, whatever the split.
uint64_t rows_digest(const std::vector<uint8_t>& rows, size_t row_bytes, uint32_t first_global, uint32_t count);

}  // namespace fabric_lib::moe::testing

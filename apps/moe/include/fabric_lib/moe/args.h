// Arguments of the four halves of one all-to-all step, as raw pointers and element strides (the
// Python layer passes torch tensors' data_ptr() and stride()). On CPU ranks the pointers are host
// memory; on GPU ranks device memory (indices, weights, bound_m included) and the calls are
// asynchronous on the given stream.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fabric_lib::moe {

// dispatch(do_send): route the local tokens and start sending them.
struct DispatchSendArgs {
  const void* x = nullptr;              // [num_tokens, H] of in_dtype
  size_t x_stride = 0;                  // elements between token rows (>= H)
  const float* x_scale = nullptr;       // [num_tokens, S] fp32, or null when S == 0
  size_t x_scale_stride_token = 0;      // elements
  size_t x_scale_stride_elem = 1;       // elements
  const uint32_t* indices = nullptr;    // [num_tokens, K] expert ids
  size_t indices_stride = 0;            // elements (>= K)
  uint32_t num_tokens = 0;              // rows given, <= max_num_tokens
  const int32_t* bound_m = nullptr;     // optional: valid tokens (<= num_tokens), a device value on GPU
};

// dispatch(do_recv): wait for the tokens and lay them out expert-contiguous (padded).
struct DispatchRecvArgs {
  int32_t* out_expert_num_tokens = nullptr;  // [L] pairs per local expert
  void* out_expert_x = nullptr;              // [out_rows, H] of in_dtype
  size_t out_x_stride = 0;                   // elements
  uint32_t out_rows = 0;                     // rows of out_expert_x (>= Geometry::max_recv_tokens is always enough)
  float* out_expert_x_scale = nullptr;       // [out_rows, S], or null when S == 0
  size_t out_scale_stride_token = 0;
  size_t out_scale_stride_elem = 1;
};

// combine(do_send): send the expert outputs back, rows in the layout dispatch produced.
struct CombineSendArgs {
  const void* expert_y = nullptr;  // [rows, H] of out_dtype
  size_t expert_y_stride = 0;      // elements
  uint32_t rows = 0;
};

// combine(do_recv): weighted sum of each token's K results in fp32, k = 0..K-1 in order.
struct CombineRecvArgs {
  void* out_tokens = nullptr;        // [num_tokens, H] of out_dtype; rows >= the valid count untouched
  size_t out_stride = 0;             // elements
  const float* weights = nullptr;    // [num_tokens, K]
  size_t weights_stride = 0;         // elements
  uint32_t num_tokens = 0;           // as given to dispatch
  const int32_t* bound_m = nullptr;  // optional, as for dispatch
};

}  // namespace fabric_lib::moe

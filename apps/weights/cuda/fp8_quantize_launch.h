// Plain-typed launch functions of the weights app's CUDA kernels (internal: host code includes
// this, never the .cu). Return a cudaError_t as int.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fabric_lib::weights::cuda {

int launch_quantize_fp8(bool src_is_bf16, const void* src, size_t src_pitch, size_t rows, size_t cols, uint8_t* q,
                        size_t q_pitch, float* scales, size_t scale_pitch, void* stream);
// dst (dense, rows x cols) = cast of src (pitch in elements): f32 -> bf16, or bf16 -> f32.
int launch_cast(bool f32_to_bf16, const void* src, size_t src_pitch, void* dst, size_t rows, size_t cols, void* stream);
const char* cuda_error_string(int code);

}  // namespace fabric_lib::weights::cuda

// fp8 e4m3 128x128 block quantization on the GPU: the same rules as fp8.h, bit for bit.
// Available when fabric_lib_weights is built with CUDA (fabric_lib_weights_cuda_available()
// says so at run time); otherwise every call returns Unsupported. No CUDA headers here: the
// stream is a cudaStream_t passed as void*.
#pragma once

#include <cstddef>
#include <cstdint>

#include "fabric_lib/status.h"
#include "fabric_lib/weights/types.h"

namespace fabric_lib::weights {

// Whether this build of the library carries the CUDA kernels.
bool fabric_lib_weights_cuda_available();

// Enqueues the quantization of a rows x cols matrix of `src_dtype` (kBf16 or kF32) in device
// memory (element (r, c) at src[r * src_pitch + c]) into q (pitch q_pitch bytes per row) and
// scales (ceil(rows/128) x ceil(cols/128) f32, pitch scale_pitch elements) on `stream`.
// Asynchronous: returns once launched (InvalidArgument for bad sizes, Internal for a launch error).
Status quantize_fp8_blocks_cuda(DType src_dtype, const void* src, size_t src_pitch, size_t rows, size_t cols,
                                uint8_t* q, size_t q_pitch, float* scales, size_t scale_pitch, void* stream);

}  // namespace fabric_lib::weights

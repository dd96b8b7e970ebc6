// Host side of the CUDA quantization: argument checks and error mapping. Built with or without
// CUDA (FABRIC_LIB_WEIGHTS_CUDA): without it every call is Unsupported.
#include "fabric_lib/weights/fp8_cuda.h"

#if FABRIC_LIB_WEIGHTS_CUDA
#include "fp8_quantize_launch.h"
#endif

namespace fabric_lib::weights {

bool fabric_lib_weights_cuda_available() { return FABRIC_LIB_WEIGHTS_CUDA != 0; }

Status quantize_fp8_blocks_cuda(DType src_dtype, const void* src, size_t src_pitch, size_t rows, size_t cols,
                                uint8_t* q, size_t q_pitch, float* scales, size_t scale_pitch, void* stream) {
#if FABRIC_LIB_WEIGHTS_CUDA
  if (src_dtype != DType::kBf16 && src_dtype != DType::kF32) return invalid_argument("quantize_fp8_blocks_cuda: source must be bf16 or f32");
  if (rows == 0 || cols == 0 || src_pitch < cols || q_pitch < cols || scale_pitch < (cols + kFp8Block - 1) / kFp8Block ||
      (rows + kFp8Block - 1) / kFp8Block > 65535) {
    return invalid_argument("quantize_fp8_blocks_cuda: bad sizes");
  }
  if (!src || !q || !scales) return invalid_argument("quantize_fp8_blocks_cuda: null pointer");
  const int rc = cuda::launch_quantize_fp8(src_dtype == DType::kBf16, src, src_pitch, rows, cols, q, q_pitch, scales,
                                           scale_pitch, stream);
  if (rc != 0) return internal_error(std::string("quantize_fp8_blocks_cuda: launch failed: ") + cuda::cuda_error_string(rc));
  return ok_status();
#else
  (void)src_dtype, (void)src, (void)src_pitch, (void)rows, (void)cols, (void)q, (void)q_pitch, (void)scales,
      (void)scale_pitch, (void)stream;
  return unsupported("fabric_lib_weights was built without CUDA");
#endif
}

}  // namespace fabric_lib::weights

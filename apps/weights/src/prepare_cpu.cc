#include <cstring>

#include "fabric_lib/weights/fp8.h"
#include "fabric_lib/weights/prepare.h"

namespace fabric_lib::weights {

void copy_box(const uint8_t* src, uint64_t src_pitch, uint8_t* dst, uint64_t dst_pitch, uint64_t rows, uint64_t cols,
              size_t esize) {
  if (src_pitch == cols && dst_pitch == cols) {
    std::memcpy(dst, src, rows * cols * esize);
    return;
  }
  for (uint64_t r = 0; r < rows; ++r) std::memcpy(dst + r * dst_pitch * esize, src + r * src_pitch * esize, cols * esize);
}

Status prepare_on_cpu(const PrepareTask& task, DType src_dtype, const uint8_t* src, uint64_t src_pitch, uint8_t* out) {
  if (task.direct) return invalid_argument("prepare: a direct task has no prepared buffer");
  const uint64_t rows = task.box.rows(), cols = task.box.cols();
  if (src_dtype == task.dtype) {
    copy_box(src, src_pitch, out, cols, rows, cols, element_size(src_dtype));
    return ok_status();
  }
  if (src_dtype == DType::kF32 && task.dtype == DType::kBf16) {
    auto* o = reinterpret_cast<uint16_t*>(out);
    for (uint64_t r = 0; r < rows; ++r) {
      const auto* s = reinterpret_cast<const float*>(src) + r * src_pitch;
      for (uint64_t c = 0; c < cols; ++c) o[r * cols + c] = f32_to_bf16(s[c]);
    }
    return ok_status();
  }
  if (src_dtype == DType::kBf16 && task.dtype == DType::kF32) {
    auto* o = reinterpret_cast<float*>(out);
    for (uint64_t r = 0; r < rows; ++r) {
      const auto* s = reinterpret_cast<const uint16_t*>(src) + r * src_pitch;
      for (uint64_t c = 0; c < cols; ++c) o[r * cols + c] = bf16_to_f32(s[c]);
    }
    return ok_status();
  }
  if (task.dtype == DType::kFp8E4m3) {
    auto* scales = reinterpret_cast<float*>(out + task.scale_offset());
    const uint64_t scale_pitch = (cols + kFp8Block - 1) / kFp8Block;
    if (src_dtype == DType::kBf16) {
      quantize_fp8_blocks_bf16(reinterpret_cast<const uint16_t*>(src), src_pitch, rows, cols, out, cols, scales, scale_pitch);
    } else if (src_dtype == DType::kF32) {
      quantize_fp8_blocks_f32(reinterpret_cast<const float*>(src), src_pitch, rows, cols, out, cols, scales, scale_pitch);
    } else {
      return invalid_argument("prepare: fp8 sources are not supported");
    }
    return ok_status();
  }
  return invalid_argument(std::string("prepare: no conversion from ") + dtype_name(src_dtype) + " to " + dtype_name(task.dtype));
}

}  // namespace fabric_lib::weights

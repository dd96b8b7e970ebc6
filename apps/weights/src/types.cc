#include "fabric_lib/weights/types.h"

#include <algorithm>

namespace fabric_lib::weights {

size_t element_size(DType t) {
  switch (t) {
    case DType::kBf16: return 2;
    case DType::kF32: return 4;
    case DType::kFp8E4m3: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kBf16: return "bf16";
    case DType::kF32: return "f32";
    case DType::kFp8E4m3: return "fp8_e4m3";
  }
  return "invalid";
}

bool is_valid_dtype(uint8_t raw) { return raw >= 1 && raw <= 3; }

Box intersect(const Box& a, const Box& b) {
  Box r{std::max(a.r0, b.r0), std::min(a.r1, b.r1), std::max(a.c0, b.c0), std::min(a.c1, b.c1)};
  if (r.empty()) return Box{};
  return r;
}

std::string to_string(const Box& b) {
  return "[" + std::to_string(b.r0) + "," + std::to_string(b.r1) + ")x[" + std::to_string(b.c0) + "," +
         std::to_string(b.c1) + ")";
}

View2d view_2d(const std::vector<uint64_t>& shape) {
  if (shape.empty()) return {};
  if (shape.size() == 1) return {shape[0], 1};
  uint64_t rows = 1;
  for (size_t i = 0; i + 1 < shape.size(); ++i) rows *= shape[i];
  return {rows, shape.back()};
}

uint64_t InferenceTensor::scale_bytes() const {
  if (dtype != DType::kFp8E4m3) return 0;
  return ((rows + kFp8Block - 1) / kFp8Block) * ((cols + kFp8Block - 1) / kFp8Block) * 4;
}

}  // namespace fabric_lib::weights

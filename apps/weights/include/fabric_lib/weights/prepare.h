// The prepare step on the CPU: turns a source box (bf16 or f32 rows in memory) into a task's
// prepared buffer (cast, or fp8 e4m3 block quantization with scales; layout in plan.h). Used by
// the trainer runtime for host memory, and as the reference for the CUDA path.
#pragma once

#include <cstdint>

#include "fabric_lib/weights/plan.h"

namespace fabric_lib::weights {

// `src` points at element (task.box.r0, task.box.c0) of a row-major source with `src_pitch`
// elements per row, of `src_dtype`; `out` has task.prepared_bytes() bytes. InvalidArgument for
// an unsupported conversion (fp8 sources, direct tasks).
Status prepare_on_cpu(const PrepareTask& task, DType src_dtype, const uint8_t* src, uint64_t src_pitch, uint8_t* out);

// Copies rows x cols elements of `esize` bytes between row-major buffers with the given pitches
// (in elements).
void copy_box(const uint8_t* src, uint64_t src_pitch, uint8_t* dst, uint64_t dst_pitch, uint64_t rows, uint64_t cols,
              size_t esize);

}  // namespace fabric_lib::weights

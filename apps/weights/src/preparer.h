// Where the trainer's prepare step runs (internal): on the CPU for host-memory shards, or on the
// GPU (CUDA builds) when shards live in GPU memory or the caller asks for it. The trainer step
// calls these; only the preparer knows whether a pointer is host or device memory.
#pragma once

#include <cstdint>
#include <memory>

#include "fabric_lib/fabric_lib.h"
#include "fabric_lib/weights/plan.h"

namespace fabric_lib::weights::detail {

class Preparer {
 public:
  virtual ~Preparer() = default;
  // Memory kind of the prepared-buffer arena (what it is registered as).
  virtual MemoryKind arena_kind() const = 0;
  // The arena, `bytes` long (owned by the preparer), or an error.
  virtual Result<uint8_t*> arena(uint64_t bytes) = 0;
  // Fills `out` (in the arena) with task `t`'s prepared bytes from a source box at `src` (pitch
  // in elements, memory of `src_kind`). Returns once `out` is ready to be written.
  virtual Status prepare(const PrepareTask& t, DType src_dtype, const uint8_t* src, uint64_t src_pitch,
                         MemoryKind src_kind, uint8_t* out) = 0;
  // Copies a rows x cols box of `esize` elements from `src` (memory of `src_kind`) into host
  // memory at `dst`. Synchronous.
  virtual Status copy_to_host(const uint8_t* src, uint64_t src_pitch, MemoryKind src_kind, uint8_t* dst, uint64_t dst_pitch,
                              uint64_t rows, uint64_t cols, size_t esize) = 0;
};

std::unique_ptr<Preparer> make_cpu_preparer();
// Unsupported in builds without CUDA.
Result<std::unique_ptr<Preparer>> make_cuda_preparer();

}  // namespace fabric_lib::weights::detail

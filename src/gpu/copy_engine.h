// Device-to-host copies for staging GPU sources (staging_domain.h), behind an interface so the
// staging logic runs, and is tested, without a GPU. cuda_copy_engine.h has the real one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "fabric_lib/status.h"

namespace fabric_lib::gpu {

class CopyEngine {
 public:
  using Token = uint64_t;
  enum class State : uint8_t { kPending, kDone, kFailed };

  virtual ~CopyEngine() = default;

  // Page-locked host memory for bounce buffers (the DMA engine copies into it directly).
  virtual Result<void*> alloc_host(size_t bytes) = 0;
  virtual void free_host(void* p) = 0;
  // The CUDA device that owns GPU memory at `ptr` (for the copy's stream).
  virtual Result<int> device_of(const void* ptr) = 0;
  // Starts copying `length` bytes from GPU memory `src` (on `device`) to host memory `dst`.
  // Copies started on one device run in the order they were started.
  virtual Result<Token> start_copy(void* dst, const void* src, size_t length, int device) = 0;
  // Whether the copy finished. kDone and kFailed (with *error) retire the token.
  virtual State poll(Token token, Status* error) = 0;
  // Waits for every started copy (before bounce buffers are freed).
  virtual void synchronize() = 0;
};

// Makes a copy engine when a domain first stages (CUDA is initialised only then).
using CopyEngineFactory = std::function<Result<std::unique_ptr<CopyEngine>>()>;

}  // namespace fabric_lib::gpu

// CopyEngine over the CUDA runtime (CUDA builds only): one non-blocking stream per device, events
// to learn when each copy is done.
#pragma once

#include <cuda_runtime_api.h>

#include <map>
#include <memory>
#include <vector>

#include "gpu/copy_engine.h"

namespace fabric_lib::gpu {

class CudaCopyEngine final : public CopyEngine {
 public:
  static Result<std::unique_ptr<CopyEngine>> create();
  ~CudaCopyEngine() override;

  Result<void*> alloc_host(size_t bytes) override;
  void free_host(void* p) override;
  Result<int> device_of(const void* ptr) override;
  Result<Token> start_copy(void* dst, const void* src, size_t length, int device) override;
  State poll(Token token, Status* error) override;
  void synchronize() override;

 private:
  CudaCopyEngine() = default;
  Result<cudaStream_t> stream_for(int device);

  std::map<int, cudaStream_t> streams_;
  std::vector<cudaEvent_t> events_;     // token = index
  std::vector<Token> free_tokens_;
};

// The factory the domain factory hands to StagingDomain.
CopyEngineFactory cuda_copy_engine_factory();

}  // namespace fabric_lib::gpu

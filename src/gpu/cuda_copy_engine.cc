#include "gpu/cuda_copy_engine.h"

#include "gpu/cuda_status.h"
#include "gpu/memory_kind.h"

namespace fabric_lib::gpu {
namespace {

// Runs with `device` current and restores the caller's device (the worker thread may serve
// sources on several GPUs).
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != device) status_ = cudaSetDevice(device);
  }
  ~DeviceScope() {
    if (previous_ >= 0 && status_ == cudaSuccess) cudaSetDevice(previous_);
  }
  cudaError_t status() const { return status_; }

 private:
  int previous_ = -1;
  cudaError_t status_ = cudaSuccess;
};

}  // namespace

Result<std::unique_ptr<CopyEngine>> CudaCopyEngine::create() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) return cuda_status("cudaGetDeviceCount", e);
  if (count == 0) return unsupported("no CUDA device");
  return std::unique_ptr<CopyEngine>(new CudaCopyEngine());
}

CudaCopyEngine::~CudaCopyEngine() {
  synchronize();
  for (cudaEvent_t ev : events_) cudaEventDestroy(ev);
  for (auto& [device, stream] : streams_) cudaStreamDestroy(stream);
}

Result<void*> CudaCopyEngine::alloc_host(size_t bytes) {
  void* p = nullptr;
  const cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
  if (e != cudaSuccess) return cuda_status("cudaHostAlloc(bounce buffers)", e);
  return p;
}

void CudaCopyEngine::free_host(void* p) {
  if (p) cudaFreeHost(p);
}

Result<int> CudaCopyEngine::device_of(const void* ptr) {
  Result<PointerInfo> info = query_pointer(ptr);
  if (!info.ok()) return info.status();
  if (info->kind != MemoryKind::kCuda) return invalid_argument("not CUDA device memory");
  return info->device;
}

Result<cudaStream_t> CudaCopyEngine::stream_for(int device) {
  auto it = streams_.find(device);
  if (it != streams_.end()) return it->second;
  DeviceScope scope(device);
  if (scope.status() != cudaSuccess) return cuda_status("cudaSetDevice", scope.status());
  cudaStream_t stream = nullptr;
  // Non-blocking: staging copies must not wait for (or hold up) the application's work on the
  // legacy default stream.
  const cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (e != cudaSuccess) return cuda_status("cudaStreamCreateWithFlags", e);
  streams_.emplace(device, stream);
  return stream;
}

Result<CopyEngine::Token> CudaCopyEngine::start_copy(void* dst, const void* src, size_t length, int device) {
  Result<cudaStream_t> stream = stream_for(device);
  if (!stream.ok()) return stream.status();
  Token token;
  if (!free_tokens_.empty()) {
    token = free_tokens_.back();
    free_tokens_.pop_back();
  } else {
    cudaEvent_t ev = nullptr;
    const cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (e != cudaSuccess) return cuda_status("cudaEventCreateWithFlags", e);
    token = events_.size();
    events_.push_back(ev);
  }
  cudaError_t e = cudaMemcpyAsync(dst, src, length, cudaMemcpyDeviceToHost, *stream);
  if (e == cudaSuccess) e = cudaEventRecord(events_[token], *stream);
  if (e != cudaSuccess) {
    free_tokens_.push_back(token);
    return cuda_status("cudaMemcpyAsync(staging)", e);
  }
  return token;
}

CopyEngine::State CudaCopyEngine::poll(Token token, Status* error) {
  const cudaError_t e = cudaEventQuery(events_[token]);
  if (e == cudaErrorNotReady) return State::kPending;
  free_tokens_.push_back(token);
  if (e == cudaSuccess) return State::kDone;
  if (error) *error = cuda_status("staging copy (cudaEventQuery)", e);
  return State::kFailed;
}

void CudaCopyEngine::synchronize() {
  for (auto& [device, stream] : streams_) cudaStreamSynchronize(stream);
}

CopyEngineFactory cuda_copy_engine_factory() {
  return [] { return CudaCopyEngine::create(); };
}

}  // namespace fabric_lib::gpu

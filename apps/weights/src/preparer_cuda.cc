// The GPU preparer (CUDA builds): H2D of offloaded (host) sources into a device scratch buffer,
// then cast or fp8 quantization by the kernels of apps/weights/cuda into a device arena, on one
// stream; prepare() returns when the stream is done, so the writes that follow read finished bytes.
#include "preparer.h"

#if FABRIC_LIB_WEIGHTS_CUDA
#include <cuda_runtime.h>

#include "fabric_lib/weights/fp8_cuda.h"
#include "fp8_quantize_launch.h"
#endif

namespace fabric_lib::weights::detail {

#if FABRIC_LIB_WEIGHTS_CUDA
namespace {

Status cuda_error(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return ok_status();
  (void)cudaGetLastError();  // clear a sticky launch error
  return Status(ErrorCode::kInternal, std::string(what) + ": " + cudaGetErrorString(e));
}

class CudaPreparer final : public Preparer {
 public:
  ~CudaPreparer() override {
    if (arena_) cudaFree(arena_);
    if (scratch_) cudaFree(scratch_);
    if (stream_) cudaStreamDestroy(stream_);
  }
  Status init() { return cuda_error(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate"); }

  MemoryKind arena_kind() const override { return MemoryKind::kCuda; }
  Result<uint8_t*> arena(uint64_t bytes) override {
    void* p = nullptr;
    FABRIC_LIB_RETURN_IF_ERROR(cuda_error(cudaMalloc(&p, bytes), "cudaMalloc (arena)"));
    arena_ = p;
    return static_cast<uint8_t*>(p);
  }

  Status prepare(const PrepareTask& t, DType src_dtype, const uint8_t* src, uint64_t src_pitch, MemoryKind src_kind,
                 uint8_t* out) override {
    const uint64_t rows = t.box.rows(), cols = t.box.cols();
    const size_t es = element_size(src_dtype);
    const void* in = src;
    uint64_t in_pitch = src_pitch;
    if (src_kind != MemoryKind::kCuda) {  // offloaded: H2D into the scratch buffer first
      FABRIC_LIB_RETURN_IF_ERROR(reserve_scratch(rows * cols * es));
      FABRIC_LIB_RETURN_IF_ERROR(cuda_error(cudaMemcpy2DAsync(scratch_, cols * es, src, src_pitch * es, cols * es, rows,
                                                              cudaMemcpyHostToDevice, stream_), "H2D"));
      in = scratch_;
      in_pitch = cols;
    }
    if (src_dtype == t.dtype) {
      FABRIC_LIB_RETURN_IF_ERROR(cuda_error(cudaMemcpy2DAsync(out, cols * es, in, in_pitch * es, cols * es, rows,
                                                              cudaMemcpyDeviceToDevice, stream_), "D2D copy"));
    } else if (t.dtype == DType::kFp8E4m3) {
      FABRIC_LIB_RETURN_IF_ERROR(quantize_fp8_blocks_cuda(src_dtype, in, in_pitch, rows, cols, out, cols,
                                                          reinterpret_cast<float*>(out + t.scale_offset()),
                                                          (cols + kFp8Block - 1) / kFp8Block, stream_));
    } else if ((src_dtype == DType::kF32 && t.dtype == DType::kBf16) || (src_dtype == DType::kBf16 && t.dtype == DType::kF32)) {
      const int rc = cuda::launch_cast(src_dtype == DType::kF32, in, in_pitch, out, rows, cols, stream_);
      FABRIC_LIB_RETURN_IF_ERROR(cuda_error(static_cast<cudaError_t>(rc), "cast kernel"));
    } else {
      return invalid_argument(std::string("prepare: no conversion from ") + dtype_name(src_dtype) + " to " + dtype_name(t.dtype));
    }
    return cuda_error(cudaStreamSynchronize(stream_), "prepare");
  }

  Status copy_to_host(const uint8_t* src, uint64_t src_pitch, MemoryKind src_kind, uint8_t* dst, uint64_t dst_pitch,
                      uint64_t rows, uint64_t cols, size_t esize) override {
    const cudaMemcpyKind kind = src_kind == MemoryKind::kCuda ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost;
    FABRIC_LIB_RETURN_IF_ERROR(cuda_error(cudaMemcpy2DAsync(dst, dst_pitch * esize, src, src_pitch * esize, cols * esize, rows,
                                                            kind, stream_), "copy to staging"));
    return cuda_error(cudaStreamSynchronize(stream_), "copy to staging");
  }

 private:
  Status reserve_scratch(uint64_t bytes) {
    if (bytes <= scratch_bytes_) return ok_status();
    if (scratch_) cudaFree(scratch_);
    scratch_ = nullptr;
    scratch_bytes_ = 0;
    FABRIC_LIB_RETURN_IF_ERROR(cuda_error(cudaMalloc(&scratch_, bytes), "cudaMalloc (scratch)"));
    scratch_bytes_ = bytes;
    return ok_status();
  }

  cudaStream_t stream_ = nullptr;
  void* arena_ = nullptr;
  void* scratch_ = nullptr;
  uint64_t scratch_bytes_ = 0;
};

}  // namespace

Result<std::unique_ptr<Preparer>> make_cuda_preparer() {
  auto p = std::make_unique<CudaPreparer>();
  FABRIC_LIB_RETURN_IF_ERROR(p->init());
  return std::unique_ptr<Preparer>(std::move(p));
}
#else
Result<std::unique_ptr<Preparer>> make_cuda_preparer() { return unsupported("fabric_lib_weights was built without CUDA"); }
#endif

}  // namespace fabric_lib::weights::detail

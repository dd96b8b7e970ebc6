#include "gpu/cuda_status.h"

#include <string>

namespace fabric_lib::gpu {

Status cuda_status(const char* call, cudaError_t error) {
  (void)cudaGetLastError();  // non-sticky errors would otherwise be reported again by the next call
  ErrorCode code = ErrorCode::kProviderError;
  switch (error) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorNotSupported:
    case cudaErrorSystemNotReady:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
    case cudaErrorInvalidDevice:
      code = ErrorCode::kUnsupported;
      break;
    case cudaErrorMemoryAllocation:
      code = ErrorCode::kResourceExhausted;
      break;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevicePointer:
      code = ErrorCode::kInvalidArgument;
      break;
    default:
      break;
  }
  return Status(code, std::string(call) + ": " + cudaGetErrorString(error) + " (CUDA error " +
                          std::to_string(static_cast<int>(error)) + ")");
}

}  // namespace fabric_lib::gpu

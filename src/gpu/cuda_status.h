// CUDA runtime errors as fabric-lib Statuses (CUDA builds only).
#pragma once

#include <cuda_runtime_api.h>

#include "fabric_lib/status.h"

namespace fabric_lib::gpu {

// "<call>: <cudaGetErrorString> (<code>)" with an ErrorCode that says what the caller can do:
// Unsupported when there is no usable device or driver, ResourceExhausted when memory ran out,
// InvalidArgument for bad values or pointers, ProviderError otherwise. Clears the runtime's
// last-error state, so one failed call does not poison the next.
Status cuda_status(const char* call, cudaError_t error);

}  // namespace fabric_lib::gpu

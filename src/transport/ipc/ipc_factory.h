// How the backend factory opens IPC domains (provider "ipc", alias "nvlink"): with the CUDA backend
// in CUDA builds (copies in `copy_mode`), host memory only otherwise.
#pragma once

#include <memory>
#include <string>

#include "gpu/copy_mode.h"
#include "transport/domain.h"

namespace fabric_lib::transport::ipc {

inline bool is_ipc_provider(const std::string& provider) { return provider == "ipc" || provider == "nvlink"; }

Result<std::unique_ptr<Domain>> open_ipc_domain(gpu::GpuCopyMode copy_mode);

}  // namespace fabric_lib::transport::ipc

// How the backend factory opens IPC domains (provider "ipc", alias "nvlink"): with the CUDA backend
// in CUDA builds (copies as `copies` says), host memory only otherwise.
#pragma once

#include <memory>
#include <string>

#include "gpu/copy_mode.h"
#include "transport/domain.h"

namespace fabric_lib::transport::ipc {

struct SharedCopies;  // gpu_backend.h

inline bool is_ipc_provider(const std::string& provider) { return provider == "ipc" || provider == "nvlink"; }

// `group_copies`: what the domains of one group share for GPU copies (one per group; the backend
// factory keeps it), so that a pass's copies of all of them are issued together.
Result<std::unique_ptr<Domain>> open_ipc_domain(const gpu::GpuCopySettings& copies,
                                                std::shared_ptr<SharedCopies> group_copies = nullptr);

}  // namespace fabric_lib::transport::ipc

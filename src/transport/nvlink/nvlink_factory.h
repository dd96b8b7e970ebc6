// How the domain factory opens nvlink domains (provider "nvlink"): with the CUDA backend in CUDA
// builds, host memory only otherwise. FABRIC_LIB_NVLINK_COPY overrides how GPU copies run
// (cuda_gpu_backend.h).
#pragma once

#include <memory>
#include <string>

#include "transport/domain.h"

namespace fabric_lib::transport::nvlink {

inline bool is_nvlink_provider(const std::string& provider) { return provider == "nvlink"; }

Result<std::unique_ptr<Domain>> open_nvlink_domain();

}  // namespace fabric_lib::transport::nvlink

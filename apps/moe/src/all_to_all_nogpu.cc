// Builds without CUDA: GPU ranks are refused.
#include "all_to_all_impl.h"

namespace fabric_lib::moe::detail {

Result<std::unique_ptr<GpuPart>> make_gpu_part(RankState&, int device, std::vector<Allocation>&) {
  return unsupported("GPU ranks (device " + std::to_string(device) + ") need a CUDA build of fabric_lib_moe");
}

bool cuda_lazy_module_loading() { return false; }

}  // namespace fabric_lib::moe::detail

#include "transport/nvlink/nvlink_factory.h"

#include "transport/nvlink/nvlink_domain.h"
#if FABRIC_LIB_HAVE_CUDA
#include "transport/nvlink/cuda_gpu_backend.h"
#endif

namespace fabric_lib::transport::nvlink {

Result<std::unique_ptr<Domain>> open_nvlink_domain() {
  NvlinkOptions options;
#if FABRIC_LIB_HAVE_CUDA
  options.gpu = cuda_gpu_backend_factory();
#endif
  Result<std::unique_ptr<NvlinkDomain>> opened = NvlinkDomain::open(std::move(options));
  if (!opened.ok()) return opened.status();
  return std::unique_ptr<Domain>(std::move(opened).value());
}

}  // namespace fabric_lib::transport::nvlink

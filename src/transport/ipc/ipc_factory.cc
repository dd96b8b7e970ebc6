#include "transport/ipc/ipc_factory.h"

#include "transport/ipc/ipc_domain.h"
#if FABRIC_LIB_HAVE_CUDA
#include "transport/ipc/cuda_gpu_backend.h"
#endif

namespace fabric_lib::transport::ipc {

Result<std::unique_ptr<Domain>> open_ipc_domain(const gpu::GpuCopySettings& copies,
                                                std::shared_ptr<SharedCopies> group_copies) {
  IpcOptions options;
#if FABRIC_LIB_HAVE_CUDA
  options.gpu = cuda_gpu_backend_factory(copies, std::move(group_copies));
#else
  (void)copies;
  (void)group_copies;
#endif
  Result<std::unique_ptr<IpcDomain>> opened = IpcDomain::open(std::move(options));
  if (!opened.ok()) return opened.status();
  return std::unique_ptr<Domain>(std::move(opened).value());
}

}  // namespace fabric_lib::transport::ipc

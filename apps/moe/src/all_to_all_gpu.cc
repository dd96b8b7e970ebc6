// GPU ranks (CUDA builds): device and mapped-host allocations, the kernels' context, and the
// launches. The direct path's IPC export/import is in gpu_direct.cc.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstring>
#include <string>

#include "all_to_all_impl.h"
#include "fabric_lib/memory.h"
#include "gpu_part.h"

namespace fabric_lib::moe::detail {

Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return ok_status();
  return Status(ErrorCode::kProviderError, std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

namespace {

// Peers write into the receive buffers: sizes they map with large pages (peer_written_cuda_bytes).
Result<Allocation> alloc_device(size_t bytes) {
  void* p = nullptr;
  const size_t n = peer_written_cuda_bytes(round_up(bytes == 0 ? 1 : bytes, 4096));
  FABRIC_LIB_RETURN_IF_ERROR(cuda_status(cudaMalloc(&p, n), "cudaMalloc"));
  FABRIC_LIB_RETURN_IF_ERROR(cuda_status(cudaMemset(p, 0, n), "cudaMemset"));
  return Allocation(p, n, [](void* q) { cudaFree(q); });
}

Result<Allocation> alloc_mapped(size_t bytes) {
  void* p = nullptr;
  const size_t n = round_up(bytes == 0 ? 1 : bytes, 4096);
  FABRIC_LIB_RETURN_IF_ERROR(
      cuda_status(cudaHostAlloc(&p, n, cudaHostAllocMapped | cudaHostAllocPortable), "cudaHostAlloc"));
  std::memset(p, 0, n);
  return Allocation(p, n, [](void* q) { cudaFreeHost(q); });
}

template <typename T>
T* device_view(void* host) {
  void* d = nullptr;
  if (cudaHostGetDevicePointer(&d, host, 0) != cudaSuccess) return nullptr;
  return static_cast<T*>(d);
}

}  // namespace

CudaGpuPart::CudaGpuPart(RankState& st, int device) : st_(st), device_(device) {}

Status CudaGpuPart::init(std::vector<Allocation>& allocations) {
  const Geometry& g = st_.g;
  if (g.experts > kernels::kMaxGpuExperts) {
    return unsupported("GPU ranks support up to " + std::to_string(kernels::kMaxGpuExperts) + " experts");
  }
  if (g.path == Path::kDirect && g.world > kernels::kMaxDirectWorld) {
    return unsupported("Path::kDirect supports up to " + std::to_string(kernels::kMaxDirectWorld) + " ranks");
  }
  FABRIC_LIB_RETURN_IF_ERROR(cuda_status(cudaSetDevice(device_), "cudaSetDevice"));
  FABRIC_LIB_RETURN_IF_ERROR(cuda_status(cudaDeviceGetAttribute(&sms_, cudaDevAttrMultiProcessorCount, device_), "SM count"));
  FABRIC_LIB_RETURN_IF_ERROR(cuda_status(kernels::prepare_kernels(g.experts), "kernel set-up"));
  const BufferPlan b = BufferPlan::from(g);
  const RecvPlanLayout lay{g.world, g.local_experts};
  auto keep = [&](Result<Allocation> a, uint8_t*& out) -> Status {
    if (!a.ok()) return a.status();
    out = static_cast<uint8_t*>(a->ptr);
    allocations.push_back(std::move(a).value());
    return ok_status();
  };
  uint8_t *route_send, *route_recv, *control, *ws;
  Regions& r = st_.regions;
  FABRIC_LIB_RETURN_IF_ERROR(keep(alloc_mapped(b.route_send), route_send));
  FABRIC_LIB_RETURN_IF_ERROR(keep(alloc_mapped(b.route_recv), route_recv));
  FABRIC_LIB_RETURN_IF_ERROR(keep(alloc_mapped(b.control), control));
  FABRIC_LIB_RETURN_IF_ERROR(keep(alloc_device(b.dispatch_send), r.dispatch_send));
  FABRIC_LIB_RETURN_IF_ERROR(keep(alloc_device(b.dispatch_recv), r.dispatch_recv));
  FABRIC_LIB_RETURN_IF_ERROR(keep(alloc_device(b.combine_send), r.combine_send));
  FABRIC_LIB_RETURN_IF_ERROR(keep(alloc_device(b.combine_recv), r.combine_recv));
  const size_t ws_bytes = sizeof(kernels::Workspace) + size_t{g.max_pairs} * 4 + (size_t{g.experts} + 1) * 4 +
                          size_t{lay.words()} * 4 + 256;
  FABRIC_LIB_RETURN_IF_ERROR(keep(alloc_device(ws_bytes), ws));
  r.route_send = route_send;
  r.route_recv = route_recv;
  st_.control = Control(control, device_view<uint8_t>(control), lay);

  kernels::Context& c = ctx_;
  c = kernels::Context{};
  c.world = g.world;
  c.rank = g.rank;
  c.experts = g.experts;
  c.local_experts = g.local_experts;
  c.top_k = g.top_k;
  c.max_tokens = g.max_tokens;
  c.private_tokens = g.private_tokens;
  c.padding = g.padding;
  c.hidden = g.hidden;
  c.hidden_scale = g.hidden_scale;
  c.in_size = static_cast<uint32_t>(g.in_size);
  c.out_size = static_cast<uint32_t>(g.out_size);
  c.x_bytes = static_cast<uint32_t>(g.x_bytes);
  c.x_stride = static_cast<uint32_t>(g.x_stride);
  c.dispatch_record = static_cast<uint32_t>(g.dispatch_record);
  c.combine_record = static_cast<uint32_t>(g.combine_record);
  c.route_block = static_cast<uint32_t>(g.route_block);
  c.max_pairs = g.max_pairs;
  c.out_fp32 = g.out_size == 4;
  c.direct = g.path == Path::kDirect;
  c.timeout_ns = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(st_.config.step_timeout * 2 + std::chrono::seconds(1)).count());
  c.route_send = device_view<uint8_t>(route_send);
  c.dispatch_send = r.dispatch_send;
  c.dispatch_recv = r.dispatch_recv;
  c.combine_send = r.combine_send;
  c.combine_recv = r.combine_recv;
  c.control = reinterpret_cast<uint64_t*>(st_.control.device());
  c.plans = reinterpret_cast<uint32_t*>(st_.control.device() + plan_region_offset());
  c.ws = reinterpret_cast<kernels::Workspace*>(ws);
  c.positions = reinterpret_cast<uint32_t*>(ws + sizeof(kernels::Workspace));
  c.expert_offset = c.positions + g.max_pairs;
  c.plan_copy = c.expert_offset + g.experts + 1;
  r.positions = c.positions;
  if (c.route_send == nullptr || c.control == nullptr) return internal_error("mapped memory has no device address");
  if (c.direct) FABRIC_LIB_RETURN_IF_ERROR(init_direct(allocations));
  return ok_status();
}

Status CudaGpuPart::select_device() {
  // This library's CUDA runtime keeps its own current device per thread (the caller's runtime,
  // torch's or the test's, does not set it for us): every launching thread selects ours.
  int current = -1;
  if (cudaGetDevice(&current) == cudaSuccess && current == device_) return ok_status();
  return cuda_status(cudaSetDevice(device_), "cudaSetDevice");
}

Status CudaGpuPart::launched(cudaError_t e, const char* what) {
  Status s = cuda_status(e, what);
  if (!s.ok()) st_.fail(s, 0);
  return s;
}

Status CudaGpuPart::dispatch_send(const DispatchSendArgs& a, void* stream) {
  if (a.num_tokens > st_.g.max_tokens) return invalid_argument("dispatch: more tokens than max_num_tokens");
  if (a.num_tokens > 0 && (a.x == nullptr || a.indices == nullptr || (st_.g.hidden_scale && a.x_scale == nullptr))) {
    return invalid_argument("dispatch: missing tokens, scales or indices");
  }
  FABRIC_LIB_RETURN_IF_ERROR(select_device());
  return launched(kernels::launch_dispatch_send(ctx_, a, sms_, static_cast<cudaStream_t>(stream)), "dispatch_send");
}

Status CudaGpuPart::dispatch_recv(const DispatchRecvArgs& a, void* stream) {
  if (a.out_expert_num_tokens == nullptr || a.out_expert_x == nullptr ||
      (st_.g.hidden_scale && a.out_expert_x_scale == nullptr)) {
    return invalid_argument("dispatch: missing outputs");
  }
  FABRIC_LIB_RETURN_IF_ERROR(select_device());
  return launched(kernels::launch_dispatch_recv(ctx_, a, sms_, static_cast<cudaStream_t>(stream)), "dispatch_recv");
}

Status CudaGpuPart::combine_send(const CombineSendArgs& a, void* stream) {
  if (a.expert_y == nullptr) return invalid_argument("combine: missing expert_y");
  FABRIC_LIB_RETURN_IF_ERROR(select_device());
  return launched(kernels::launch_combine_send(ctx_, a, sms_, static_cast<cudaStream_t>(stream)), "combine_send");
}

Status CudaGpuPart::combine_recv(const CombineRecvArgs& a, void* stream) {
  if (a.num_tokens > 0 && (a.out_tokens == nullptr || a.weights == nullptr)) {
    return invalid_argument("combine: missing outputs or weights");
  }
  FABRIC_LIB_RETURN_IF_ERROR(select_device());
  return launched(kernels::launch_combine_recv(ctx_, a, sms_, static_cast<cudaStream_t>(stream)), "combine_recv");
}

Result<uint64_t> CudaGpuPart::synchronize_and_step() {
  FABRIC_LIB_RETURN_IF_ERROR(cuda_status(cudaSetDevice(device_), "cudaSetDevice"));
  FABRIC_LIB_RETURN_IF_ERROR(cuda_status(cudaDeviceSynchronize(), "cudaDeviceSynchronize"));
  uint64_t step = 0;
  FABRIC_LIB_RETURN_IF_ERROR(cuda_status(cudaMemcpy(&step, &ctx_.ws->step, 8, cudaMemcpyDeviceToHost), "read the step"));
  return step;
}

bool cuda_lazy_module_loading() {
  // Through the runtime's entry-point query: the library links no libcuda.
  using GetLoadingMode = CUresult (*)(CUmoduleLoadingMode*);
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion("cuModuleGetLoadingMode", &fn, 12000, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess || fn == nullptr) {
    return false;
  }
  CUmoduleLoadingMode mode{};
  return reinterpret_cast<GetLoadingMode>(fn)(&mode) == CUDA_SUCCESS && mode == CU_MODULE_LAZY_LOADING;
}

Result<std::unique_ptr<GpuPart>> make_gpu_part(RankState& st, int device, std::vector<Allocation>& allocations) {
  auto part = std::make_unique<CudaGpuPart>(st, device);
  FABRIC_LIB_RETURN_IF_ERROR(part->init(allocations));
  return std::unique_ptr<GpuPart>(std::move(part));
}

}  // namespace fabric_lib::moe::detail

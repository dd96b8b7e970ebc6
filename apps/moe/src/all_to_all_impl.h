// The state behind AllToAll: buffers and registrations, the rank state shared with the proxy and
// the halves, and the GPU part (CUDA builds).
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "cpu_halves.h"
#include "fabric_lib/moe/all_to_all.h"
#include "fabric_lib/moe/wire.h"
#include "host_proxy.h"
#include "rank_state.h"

namespace fabric_lib::moe::detail {

// One allocation: host memory (aligned, zeroed) or, through the GPU part, device / mapped memory.
struct Allocation {
  void* ptr = nullptr;
  size_t bytes = 0;
  void (*free_fn)(void*) = nullptr;
  Allocation() = default;
  Allocation(void* p, size_t b, void (*f)(void*)) : ptr(p), bytes(b), free_fn(f) {}
  Allocation(Allocation&& o) noexcept : ptr(o.ptr), bytes(o.bytes), free_fn(o.free_fn) { o.ptr = nullptr; }
  Allocation& operator=(Allocation&&) = delete;
  ~Allocation() {
    if (ptr && free_fn) free_fn(ptr);
  }
};

Result<Allocation> allocate_host(size_t bytes);

// What CUDA builds add (all_to_all_gpu.cc; all_to_all_nogpu.cc otherwise).
class GpuPart {
 public:
  virtual ~GpuPart() = default;
  virtual Status dispatch_send(const DispatchSendArgs& a, void* stream) = 0;
  virtual Status dispatch_recv(const DispatchRecvArgs& a, void* stream) = 0;
  virtual Status combine_send(const CombineSendArgs& a, void* stream) = 0;
  virtual Status combine_recv(const CombineRecvArgs& a, void* stream) = 0;
  // kDirect: this rank's IPC handles (RankInfo::ipc_blob), and opening the peers'.
  virtual std::vector<uint8_t> ipc_blob() const = 0;
  virtual Status connect_direct(const std::vector<RankInfo>& infos) = 0;
  // Waits for the device to finish everything issued, then reads the device's step counter
  // (graph replays advance it without the host knowing).
  virtual Result<uint64_t> synchronize_and_step() = 0;
};

// Allocates the regions of `st` on `device` (device memory, mapped host memory for the words
// and route blocks), fills st.regions / st.control, and returns the GPU part.
Result<std::unique_ptr<GpuPart>> make_gpu_part(RankState& st, int device, std::vector<Allocation>& allocations);
// True when CUDA loads modules lazily in this process (CUDA_MODULE_LOADING unset or LAZY); false
// in builds without CUDA. Lazy loading makes a kernel's first launch wait for the kernels already
// running in the context while holding it, so a CUDA call on the proxy thread (the ipc backend's
// copies) waits behind a waiting half: the step fails at its deadline. failure_hint says so.
bool cuda_lazy_module_loading();

struct AllToAllImpl {
  TransferEngine* engine = nullptr;
  int device = -1;
  RankState st;
  BufferPlan plan;
  std::vector<Allocation> allocations;
  std::vector<MrHandle> registered;
  MrRegistration route_send, route_recv, dispatch_send, dispatch_recv, combine_send, combine_recv;
  std::unique_ptr<GpuPart> gpu;
  std::unique_ptr<HostProxy> proxy;
  bool connected = false;
  bool finished = false;
  std::vector<MrDesc> peer_descs;  // the peers' route-receive regions (barrier targets)
  CpuStep cpu;
  enum class Phase { kIdle, kDispatchSent, kDispatchReceived, kCombineSent, kFinished } phase = Phase::kIdle;
  uint64_t issued = 0;
  // Step latency on the engine's MetricsRegistry: dispatch_send's call to combine_recv's return
  // (host time; on the GPU paths the time to issue the step's work).
  MetricHistogram step_seconds;
  MetricCounter steps;
  std::chrono::steady_clock::time_point step_start;

  ~AllToAllImpl();
  Status allocate_and_register();
  Status check_phase(Phase expected, const char* call) const;
};

}  // namespace fabric_lib::moe::detail

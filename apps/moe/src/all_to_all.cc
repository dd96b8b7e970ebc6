// AllToAll: creation (buffers, registrations), connect (RankInfo validation, proxy), and the
// halves' entry points with the step order they enforce.
#include "fabric_lib/moe/all_to_all.h"

#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <cstring>
#include <string>

#include "all_to_all_impl.h"

namespace fabric_lib::moe {
using detail::AllToAllImpl;

namespace detail {

Result<Allocation> allocate_host(size_t bytes) {
  const size_t n = round_up(bytes == 0 ? 1 : bytes, 4096);
  void* p = std::aligned_alloc(4096, n);
  if (p == nullptr) return resource_exhausted("cannot allocate " + std::to_string(n) + " bytes");
  std::memset(p, 0, n);
  return Allocation(p, n, [](void* q) { std::free(q); });
}

AllToAllImpl::~AllToAllImpl() {
  if (proxy) proxy->stop();
  // Nothing may still write into the regions once they are unregistered and freed: a failed
  // step can leave writes in flight, so their requests must have ended (the engine's deadlines
  // end them; stop() of the engine ends all).
  for (MrHandle h : registered) engine->unregister_memory(h);
}

Status AllToAllImpl::allocate_and_register() {
  const Geometry& g = st.g;
  plan = BufferPlan::from(g);
  const RecvPlanLayout lay{g.world, g.local_experts};
  if (device >= 0) {
    Result<std::unique_ptr<GpuPart>> gp = make_gpu_part(st, device, allocations);
    if (!gp.ok()) return gp.status();
    gpu = std::move(gp).value();
  } else {
    uint8_t* ptrs[8];
    const size_t sizes[8] = {plan.route_send,   plan.route_recv,   plan.dispatch_send, plan.dispatch_recv,
                             plan.combine_send, plan.combine_recv, plan.control,       plan.workspace};
    for (int i = 0; i < 8; ++i) {
      Result<Allocation> a = allocate_host(sizes[i]);
      if (!a.ok()) return a.status();
      ptrs[i] = static_cast<uint8_t*>(a->ptr);
      allocations.push_back(std::move(a).value());
    }
    st.regions = {ptrs[0], ptrs[1], ptrs[2], ptrs[3], ptrs[4], ptrs[5], reinterpret_cast<uint32_t*>(ptrs[7])};
    st.control = Control(ptrs[6], ptrs[6], lay);
  }
  if (st.config.path == Path::kDirect) return ok_status();  // the engine carries nothing
  const MemoryKind data_kind = device >= 0 ? MemoryKind::kCuda : MemoryKind::kHost;
  auto reg = [&](uint8_t* p, size_t bytes, Access access, MemoryKind kind, MrRegistration& out,
                 const char* what) -> Status {
    Result<MrRegistration> r = engine->register_memory(p, round_up(bytes == 0 ? 1 : bytes, 4096), access, kind);
    if (!r.ok()) return Status(r.status().code(), std::string("register ") + what + ": " + r.status().message());
    out = *r;
    registered.push_back(out.handle);
    return ok_status();
  };
  const Regions& rg = st.regions;
  FABRIC_LIB_RETURN_IF_ERROR(reg(rg.route_send, plan.route_send, Access::kLocalOnly, MemoryKind::kHost, route_send, "route send"));
  FABRIC_LIB_RETURN_IF_ERROR(reg(rg.route_recv, plan.route_recv, Access::kRemoteWrite, MemoryKind::kHost, route_recv, "route recv"));
  FABRIC_LIB_RETURN_IF_ERROR(reg(rg.dispatch_send, plan.dispatch_send, Access::kLocalOnly, data_kind, dispatch_send, "dispatch send"));
  FABRIC_LIB_RETURN_IF_ERROR(reg(rg.dispatch_recv, plan.dispatch_recv, Access::kRemoteWrite, data_kind, dispatch_recv, "dispatch recv"));
  FABRIC_LIB_RETURN_IF_ERROR(reg(rg.combine_send, plan.combine_send, Access::kLocalOnly, data_kind, combine_send, "combine send"));
  FABRIC_LIB_RETURN_IF_ERROR(reg(rg.combine_recv, plan.combine_recv, Access::kRemoteWrite, data_kind, combine_recv, "combine recv"));
  return ok_status();
}

Status AllToAllImpl::check_phase(Phase expected, const char* call) const {
  Status f = st.failure_status();
  if (!f.ok()) return f;
  if (!connected) return Status(ErrorCode::kFailedPrecondition, std::string(call) + ": connect() first");
  if (phase != expected) {
    return Status(ErrorCode::kFailedPrecondition,
                  std::string(call) + " out of order (each step: dispatch send, dispatch recv, combine send, combine recv)");
  }
  return ok_status();
}

}  // namespace detail

AllToAll::AllToAll(std::unique_ptr<AllToAllImpl> impl) : impl_(std::move(impl)) {}
AllToAll::~AllToAll() = default;

Result<std::unique_ptr<AllToAll>> AllToAll::create(const MoeConfig& config, TransferEngine& engine, int device) {
  FABRIC_LIB_RETURN_IF_ERROR(config.validate());
  if (config.path == Path::kDirect && device < 0) return invalid_argument("Path::kDirect needs GPU ranks (device >= 0)");
  auto impl = std::make_unique<AllToAllImpl>();
  impl->engine = &engine;
  impl->device = device;
  impl->st.config = config;
  impl->st.g = Geometry::from(config);
  impl->st.on_gpu = device >= 0;
  if (impl->st.on_gpu && config.path == Path::kProxy && engine.provider().rfind("ipc", 0) == 0 &&
      detail::cuda_lazy_module_loading()) {
    impl->st.failure_hint =
        " [CUDA loads modules lazily here and the engine's ipc backend copies with CUDA calls on the proxy thread: a kernel "
        "this process launches for the first time while a half waits holds the GPU context until the step fails. Set "
        "CUDA_MODULE_LOADING=EAGER, or launch every kernel of the step once before the first step (docs/moe.md, "
        "\"Lazy module loading\")]";
  }
  {
    const MetricLabels labels = {{"path", config.path == Path::kDirect ? "direct" : "proxy"},
                                 {"device", device >= 0 ? "gpu" : "cpu"}};
    MetricsRegistry& r = engine.metrics_registry();
    Result<MetricHistogram> h = r.histogram("fabric_lib_moe_step_seconds",
                                            "MoE dispatch + combine step: dispatch_send's call to combine_recv's return.", labels);
    Result<MetricCounter> c = r.counter("fabric_lib_moe_steps_total", "MoE dispatch + combine steps completed.", labels);
    if (h.ok()) impl->step_seconds = *h;  // constant, valid names: cannot fail
    if (c.ok()) impl->steps = *c;
  }
  FABRIC_LIB_RETURN_IF_ERROR(impl->allocate_and_register());
  return std::unique_ptr<AllToAll>(new AllToAll(std::move(impl)));
}

std::vector<uint8_t> AllToAll::local_info() const {
  const AllToAllImpl& m = *impl_;
  RankInfo info;
  info.path = m.st.config.path;
  info.rank = m.st.g.rank;
  info.world = m.st.g.world;
  info.domains = static_cast<uint32_t>(m.engine->num_domains());
  info.fingerprint = m.st.config.fingerprint();
  info.host_id = host_identity();
  info.pid = static_cast<uint32_t>(getpid());
  info.address = m.engine->main_address();
  info.route_recv = m.route_recv.desc;
  info.dispatch_recv = m.dispatch_recv.desc;
  info.combine_recv = m.combine_recv.desc;
  if (m.gpu) info.ipc_blob = m.gpu->ipc_blob();
  return info.encode();
}

Status AllToAll::connect(std::span<const std::vector<uint8_t>> infos) {
  AllToAllImpl& m = *impl_;
  if (m.connected) return Status(ErrorCode::kFailedPrecondition, "connect: already connected");
  const Geometry& g = m.st.g;
  if (infos.size() != g.world) {
    return invalid_argument("connect: " + std::to_string(infos.size()) + " infos for world size " + std::to_string(g.world));
  }
  std::vector<RankInfo> decoded;
  const uint64_t fp = m.st.config.fingerprint();
  for (uint32_t r = 0; r < g.world; ++r) {
    Result<RankInfo> info = RankInfo::decode(infos[r]);
    if (!info.ok()) return Status(info.status().code(), "connect: rank " + std::to_string(r) + ": " + info.status().message());
    const std::string who = "connect: rank " + std::to_string(r) + "'s info ";
    if (info->rank != r || info->world != g.world) return invalid_argument(who + "names another rank or world size");
    if (info->fingerprint != fp) return invalid_argument(who + "comes from a different MoE configuration");
    if (info->path != m.st.config.path) return invalid_argument(who + "uses another path");
    if (info->domains != m.engine->num_domains()) return invalid_argument(who + "has another number of domains");
    decoded.push_back(std::move(info).value());
  }
  if (infos[g.rank] != local_info()) return invalid_argument("connect: the entry for this rank is not its local_info()");
  for (const RankInfo& i : decoded) {
    if (i.rank != g.rank && !i.route_recv.empty()) m.peer_descs.push_back(i.route_recv);
  }
  if (m.st.config.path == Path::kDirect) {
    for (const RankInfo& i : decoded) {
      if (i.host_id != decoded[g.rank].host_id) return invalid_argument("connect: Path::kDirect needs every rank on one host");
    }
    FABRIC_LIB_RETURN_IF_ERROR(m.gpu->connect_direct(decoded));
  } else {
    detail::ProxySetup setup;
    setup.engine = m.engine;
    setup.state = &m.st;
    setup.infos = std::move(decoded);
    setup.route_send_mr = m.route_send.handle;
    setup.dispatch_send_mr = m.dispatch_send.handle;
    setup.combine_send_mr = m.combine_send.handle;
    Result<std::unique_ptr<detail::HostProxy>> proxy = detail::HostProxy::start(std::move(setup));
    if (!proxy.ok()) return proxy.status();
    m.proxy = std::move(proxy).value();
  }
  m.connected = true;
  return ok_status();
}

Status AllToAll::dispatch_send(const DispatchSendArgs& args, void* stream) {
  AllToAllImpl& m = *impl_;
  FABRIC_LIB_RETURN_IF_ERROR(m.check_phase(AllToAllImpl::Phase::kIdle, "dispatch_send"));
  m.step_start = std::chrono::steady_clock::now();
  Status s = m.gpu ? m.gpu->dispatch_send(args, stream) : detail::cpu_dispatch_send(m.st, m.cpu, args);
  if (!s.ok()) return s;
  m.phase = AllToAllImpl::Phase::kDispatchSent;
  ++m.issued;
  return s;
}

Status AllToAll::dispatch_recv(const DispatchRecvArgs& args, void* stream) {
  AllToAllImpl& m = *impl_;
  FABRIC_LIB_RETURN_IF_ERROR(m.check_phase(AllToAllImpl::Phase::kDispatchSent, "dispatch_recv"));
  Status s = m.gpu ? m.gpu->dispatch_recv(args, stream) : detail::cpu_dispatch_recv(m.st, m.cpu, args);
  if (s.ok()) m.phase = AllToAllImpl::Phase::kDispatchReceived;
  return s;
}

Status AllToAll::combine_send(const CombineSendArgs& args, void* stream) {
  AllToAllImpl& m = *impl_;
  FABRIC_LIB_RETURN_IF_ERROR(m.check_phase(AllToAllImpl::Phase::kDispatchReceived, "combine_send"));
  Status s = m.gpu ? m.gpu->combine_send(args, stream) : detail::cpu_combine_send(m.st, m.cpu, args);
  if (s.ok()) m.phase = AllToAllImpl::Phase::kCombineSent;
  return s;
}

Status AllToAll::combine_recv(const CombineRecvArgs& args, void* stream) {
  AllToAllImpl& m = *impl_;
  FABRIC_LIB_RETURN_IF_ERROR(m.check_phase(AllToAllImpl::Phase::kCombineSent, "combine_recv"));
  Status s = m.gpu ? m.gpu->combine_recv(args, stream) : detail::cpu_combine_recv(m.st, m.cpu, args);
  if (s.ok()) {
    m.phase = AllToAllImpl::Phase::kIdle;
    m.step_seconds.observe(std::chrono::steady_clock::now() - m.step_start);
    m.steps.add();
  }
  return s;
}

Status AllToAll::finish(std::chrono::milliseconds timeout) {
  AllToAllImpl& m = *impl_;
  FABRIC_LIB_RETURN_IF_ERROR(m.check_phase(AllToAllImpl::Phase::kIdle, "finish"));
  if (m.finished) return Status(ErrorCode::kFailedPrecondition, "finish: already finished");
  m.finished = true;
  m.phase = AllToAllImpl::Phase::kFinished;
  const auto budget = std::chrono::duration_cast<std::chrono::nanoseconds>(timeout);
  uint64_t last = m.cpu.step;
  if (m.gpu) {
    Result<uint64_t> s = m.gpu->synchronize_and_step();
    if (!s.ok()) return s.status();
    last = *s;
    FABRIC_LIB_RETURN_IF_ERROR(m.st.failure_status());
    // Direct path: no engine traffic to settle; the caller's own barrier must follow (docs/moe.md).
    if (m.st.config.path == Path::kDirect) return ok_status();
  }
  if (last > 0) {
    FABRIC_LIB_RETURN_IF_ERROR(detail::wait_word(m.st, kSendFree, last, budget, "the last step's writes"));
    FABRIC_LIB_RETURN_IF_ERROR(detail::wait_word(m.st, kCombineFree, last, budget, "the last step's writes"));
  }
  if (m.peer_descs.empty()) return ok_status();
  const uint32_t imm = m.st.config.imm_base + 3;
  // Callbacks own the counters: a late completion never touches this frame.
  auto arrived = std::make_shared<CompletionCounter>();
  auto sent = std::make_shared<CompletionCounter>();
  auto count_into = [](std::shared_ptr<CompletionCounter> c) {
    return Completion::callback([c](const Status& s) { (s.ok() ? c->done : c->errors).fetch_add(1); });
  };
  FABRIC_LIB_RETURN_IF_ERROR(m.engine->imms().expect(imm, m.peer_descs.size(), count_into(arrived)));
  Result<TransferId> id = m.engine->submit_barrier(imm, m.peer_descs, count_into(sent).with_timeout(timeout));
  bool ok = id.ok() && arrived->wait_for(1, timeout) && sent->wait_for(1, timeout);
  ok = ok && arrived->errors.load() == 0 && sent->errors.load() == 0;
  m.engine->imms().release(imm);
  if (!id.ok()) return id.status();
  if (!ok) return Status(ErrorCode::kDeadlineExceeded, "finish: not every peer reached the end of the step stream");
  return ok_status();
}

Status AllToAll::status() const { return impl_->st.failure_status(); }
const MoeConfig& AllToAll::config() const { return impl_->st.config; }
const Geometry& AllToAll::geometry() const { return impl_->st.g; }
BufferPlan AllToAll::buffers() const { return impl_->plan; }
bool AllToAll::on_gpu() const { return impl_->gpu != nullptr; }
uint64_t AllToAll::steps_issued() const { return impl_->issued; }
std::vector<ProxyStepTimes> AllToAll::take_proxy_times() {
  return impl_->proxy ? impl_->proxy->take_step_times() : std::vector<ProxyStepTimes>{};
}

}  // namespace fabric_lib::moe

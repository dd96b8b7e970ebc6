#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "engine/backend_factory.h"
#include "engine/builder_options.h"
#include "engine/builder_testing.h"
#include "engine/engine_impl.h"
#include "fabric_lib/engine_builder.h"
#include "fabric_lib/topology.h"
#include "gpu/memory_kind.h"

namespace fabric_lib {

TransferEngineBuilder::TransferEngineBuilder() : options_(std::make_unique<Options>()) {}
TransferEngineBuilder::~TransferEngineBuilder() = default;
TransferEngineBuilder::TransferEngineBuilder(const TransferEngineBuilder& other)
    : options_(std::make_unique<Options>(*other.options_)) {}
TransferEngineBuilder& TransferEngineBuilder::operator=(const TransferEngineBuilder& other) {
  if (this != &other) options_ = std::make_unique<Options>(*other.options_);
  return *this;
}

TransferEngineBuilder& TransferEngineBuilder::provider(std::string name) {
  options_->provider = std::move(name);
  return *this;
}
TransferEngineBuilder& TransferEngineBuilder::domains_per_group(size_t n) {
  options_->domains_per_group = n;
  return *this;
}
TransferEngineBuilder& TransferEngineBuilder::groups(size_t n) {
  options_->groups = n;
  return *this;
}
TransferEngineBuilder& TransferEngineBuilder::interfaces(std::vector<std::string> names) {
  options_->interfaces = std::move(names);
  return *this;
}
TransferEngineBuilder& TransferEngineBuilder::group_interfaces(size_t group, std::vector<std::string> names) {
  options_->group_interfaces[group] = std::move(names);
  return *this;
}
TransferEngineBuilder& TransferEngineBuilder::pin_worker(size_t group, int cpu) {
  options_->core.worker_cpus[group] = cpu;
  return *this;
}
TransferEngineBuilder& TransferEngineBuilder::pin_watcher(int cpu) {
  options_->core.watcher_cpu = cpu;
  return *this;
}
TransferEngineBuilder& TransferEngineBuilder::idle_policy(IdlePolicy policy) {
  options_->core.idle_policy = policy;
  return *this;
}
TransferEngineBuilder& TransferEngineBuilder::post_on_caller_thread(bool on) {
  options_->core.post_on_caller = on;
  return *this;
}
TransferEngineBuilder& TransferEngineBuilder::trust_provider_calls(bool on) {
  options_->core.trust_provider_calls = on;
  return *this;
}
TransferEngineBuilder& TransferEngineBuilder::max_inflight_per_domain(size_t n) {
  options_->core.max_inflight_per_domain = n;
  return *this;
}
TransferEngineBuilder& TransferEngineBuilder::max_message_bytes(size_t n) {
  options_->core.max_message_bytes = n;
  return *this;
}
TransferEngineBuilder& TransferEngineBuilder::imm_table_capacity(size_t n) {
  options_->core.imm_table_capacity = n;
  return *this;
}
TransferEngineBuilder& TransferEngineBuilder::default_timeout(std::chrono::nanoseconds timeout) {
  options_->core.default_timeout = timeout;
  return *this;
}
TransferEngineBuilder& TransferEngineBuilder::stall_timeout(std::chrono::nanoseconds timeout) {
  options_->core.stall_timeout = timeout;
  return *this;
}
TransferEngineBuilder& TransferEngineBuilder::peer_retry_interval(std::chrono::nanoseconds interval) {
  options_->core.peer_retry_interval = interval;
  return *this;
}
TransferEngineBuilder& TransferEngineBuilder::liveness_probe(std::chrono::nanoseconds interval, uint32_t misses) {
  options_->core.probe_interval = interval;
  options_->core.probe_misses = misses;
  return *this;
}
TransferEngineBuilder& TransferEngineBuilder::on_health_event(HealthCallback callback) {
  options_->core.on_health_event = std::move(callback);
  return *this;
}
TransferEngineBuilder& TransferEngineBuilder::record_submit_latency(bool on) {
  options_->core.record_submit_latency = on;
  return *this;
}
TransferEngineBuilder& TransferEngineBuilder::metrics(bool on) {
  options_->core.metrics = on;
  return *this;
}
TransferEngineBuilder& TransferEngineBuilder::metrics_endpoint(std::string address) {
  options_->metrics_endpoint = std::move(address);
  return *this;
}
TransferEngineBuilder& TransferEngineBuilder::from_topology(const Topology& topology, size_t nets_per_gpu) {
  if (topology.groups.empty()) return *this;
  size_t domains = nets_per_gpu;
  if (domains == 0) {
    domains = SIZE_MAX;
    for (const DeviceGroup& g : topology.groups) domains = std::min(domains, std::max<size_t>(1, g.nics.size()));
  }
  groups(topology.groups.size());
  domains_per_group(domains);
  options_->group_interfaces.clear();
  options_->core.worker_cpus.clear();
  for (size_t g = 0; g < topology.groups.size(); ++g) {
    std::vector<std::string> names = topology.group_interfaces(g);
    if (!names.empty()) group_interfaces(g, std::move(names));
    if (topology.groups[g].worker_cpu >= 0) pin_worker(g, topology.groups[g].worker_cpu);
  }
  if (topology.groups[0].watcher_cpu >= 0) pin_watcher(topology.groups[0].watcher_cpu);
  return *this;
}
TransferEngineBuilder& TransferEngineBuilder::gpu_memory_on_nic(bool on) {
  options_->gpu_memory_on_nic = on;
  return *this;
}

TransferEngineBuilder& TransferEngineBuilder::ipc_launcher_copies(size_t copies) {
  options_->ipc_launcher_copies = copies;
  return *this;
}

TransferEngineBuilder& TransferEngineBuilder::ipc_gpu_copies(std::string mode) {
  options_->ipc_gpu_copies = std::move(mode);
  return *this;
}
TransferEngineBuilder& TransferEngineBuilder::simulate_unordered_network(uint64_t seed) {
  options_->reorder_seed = seed;
  return *this;
}

namespace {

using Options = TransferEngineBuilder::Options;

// A count from the environment variable `name`, if it is set: digits only (strtoull alone would
// take "-1" as 2^64 - 1, and " 12"). `what` says what the number means, for the error.
Status count_from_env(const char* name, const char* what, size_t* out) {
  const char* env = std::getenv(name);
  if (env == nullptr || *env == '\0') return ok_status();
  char* end = nullptr;
  errno = 0;
  const unsigned long long n = std::strtoull(env, &end, 10);
  if (!std::isdigit(static_cast<unsigned char>(env[0])) || *end != '\0' || errno == ERANGE) {
    return invalid_argument(std::string(name) + " must be " + what + ", not '" + env + "'");
  }
  *out = static_cast<size_t>(n);
  return ok_status();
}

// Environment variables override what the code configured; read here, once per build().
Status apply_environment(Options& o) {
  if (const char* env = std::getenv("FABRIC_LIB_PROVIDER"); env && *env) o.provider = env;
  if (const char* env = std::getenv("FABRIC_LIB_IDLE_POLICY"); env && *env) {
    const std::string policy = env;
    if (policy == "spin") {
      o.core.idle_policy = IdlePolicy::kSpin;
    } else if (policy == "adaptive") {
      o.core.idle_policy = IdlePolicy::kAdaptive;
    } else {
      return invalid_argument("FABRIC_LIB_IDLE_POLICY must be 'spin' or 'adaptive', not '" + policy + "'");
    }
  }
  if (const char* env = std::getenv("FABRIC_LIB_HMEM"); env && std::strcmp(env, "0") == 0) o.gpu_memory_on_nic = false;
  if (const char* env = std::getenv("FABRIC_LIB_METRICS_ADDR"); env && *env) o.metrics_endpoint = env;
  for (const char* name : {"FABRIC_LIB_IPC_COPY", "FABRIC_LIB_NVLINK_COPY"}) {  // the second: its old name
    if (const char* env = std::getenv(name); env && *env) {
      o.ipc_gpu_copies = env;
      break;
    }
  }
  if (const char* env = std::getenv("FABRIC_LIB_IPC_LAUNCHER_PIECES"); env && *env) {
    // Its old name counted kernel pieces; a number meant for it would mean something else now.
    return invalid_argument(
        "FABRIC_LIB_IPC_LAUNCHER_PIECES is gone: the launcher threshold counts copies (a paged write's pages) "
        "since 2026-12-05; set FABRIC_LIB_IPC_LAUNCHER_COPIES (docs/gpu.md)");
  }
  Status s = count_from_env("FABRIC_LIB_IPC_LAUNCHER_COPIES", "a number of copies (0: no launcher thread)",
                             &o.ipc_launcher_copies);
  if (!s.ok()) return s;
  s = count_from_env("FABRIC_LIB_IPC_LAUNCH_WARPS", "a number of warps (0: 16 KiB pieces always)", &o.ipc_min_launch_warps);
  if (!s.ok()) return s;
  size_t loads = o.ipc_loads_per_lane;
  s = count_from_env("FABRIC_LIB_IPC_COPY_LOADS", "4 or 8 (loads in flight per lane)", &loads);
  if (!s.ok()) return s;
  if (loads != 4 && loads != 8) {
    return invalid_argument("FABRIC_LIB_IPC_COPY_LOADS must be 4 or 8 (loads in flight per lane), not '" +
                            std::to_string(loads) + "'");
  }
  o.ipc_loads_per_lane = static_cast<uint32_t>(loads);
  size_t spread = o.core.one_medium_spread ? 1 : 0;
  s = count_from_env("FABRIC_LIB_ONE_MEDIUM_SPREAD", "0 or 1 (default-routed requests over a one-medium group's domains)",
                     &spread);
  if (!s.ok()) return s;
  if (spread > 1) {
    return invalid_argument("FABRIC_LIB_ONE_MEDIUM_SPREAD must be 0 or 1, not '" + std::to_string(spread) + "'");
  }
  o.core.one_medium_spread = spread == 1;
  s = count_from_env("FABRIC_LIB_IPC_COPY_STREAMS", "a number of streams per device, 1 to 16", &o.ipc_copy_streams);
  if (!s.ok()) return s;
  if (o.ipc_copy_streams < 1 || o.ipc_copy_streams > 16) {
    return invalid_argument("FABRIC_LIB_IPC_COPY_STREAMS must be 1 to 16 (streams per device), not '" +
                            std::to_string(o.ipc_copy_streams) + "'");
  }
  return ok_status();
}

Status validate(const Options& o) {
  if (o.provider.empty()) return invalid_argument("provider name is empty");
  if (o.domains_per_group == 0 || o.domains_per_group > kMaxDomainsPerGroup) {
    return invalid_argument("domains_per_group must be 1.." + std::to_string(kMaxDomainsPerGroup));
  }
  if (o.groups == 0 || o.groups > 64) return invalid_argument("groups must be 1..64");
  for (const auto& [group, names] : o.group_interfaces) {
    if (group >= o.groups) return invalid_argument("group_interfaces names group " + std::to_string(group));
  }
  const long cpus = sysconf(_SC_NPROCESSORS_CONF);
  for (const auto& [group, cpu] : o.core.worker_cpus) {
    if (group >= o.groups) return invalid_argument("pin_worker names group " + std::to_string(group));
    if (cpu < 0 || cpu >= cpus) {
      return invalid_argument("pin_worker: CPU " + std::to_string(cpu) + " does not exist (" + std::to_string(cpus) +
                              " CPUs)");
    }
  }
  if (o.core.watcher_cpu < -1 || o.core.watcher_cpu >= cpus) {
    return invalid_argument("pin_watcher: CPU " + std::to_string(o.core.watcher_cpu) + " does not exist (" +
                            std::to_string(cpus) + " CPUs)");
  }
  auto has_empty = [](const std::vector<std::string>& names) {
    for (const auto& n : names) {
      if (n.empty()) return true;
    }
    return false;
  };
  if (has_empty(o.interfaces)) return invalid_argument("empty interface name");
  for (const auto& [group, names] : o.group_interfaces) {
    if (has_empty(names)) return invalid_argument("empty interface name for group " + std::to_string(group));
  }
  if (o.core.max_message_bytes == 0 || o.core.max_message_bytes > (size_t{1} << 30)) {
    return invalid_argument("max_message_bytes must be 1..1 GiB");
  }
  const detail::EngineOptions& c = o.core;
  if (c.imm_table_capacity == 0) return invalid_argument("imm_table_capacity must be >= 1");
  if (c.default_timeout.count() < 0 || c.stall_timeout.count() < 0 || c.peer_retry_interval.count() < 0 ||
      c.probe_interval.count() < 0) {
    return invalid_argument("timeouts and intervals must not be negative");
  }
  if (c.probe_interval.count() > 0 && c.probe_misses == 0) return invalid_argument("liveness_probe needs misses >= 1");
  gpu::GpuCopyMode mode;
  if (!gpu::parse_gpu_copy_mode(o.ipc_gpu_copies.c_str(), &mode)) {
    return invalid_argument("ipc_gpu_copies (or FABRIC_LIB_IPC_COPY) must be auto, memcpy, batch or kernel, not '" +
                            o.ipc_gpu_copies + "'");
  }
  return ok_status();
}

}  // namespace

Result<std::unique_ptr<TransferEngine>> TransferEngineBuilder::build() const {
  Options o = *options_;
  FABRIC_LIB_RETURN_IF_ERROR(apply_environment(o));
  FABRIC_LIB_RETURN_IF_ERROR(validate(o));

  detail::EngineOptions core = o.core;
  core.groups.assign(o.groups, {});
  for (size_t g = 0; g < o.groups; ++g) {
    std::vector<std::string> names = o.interfaces;
    if (auto it = o.group_interfaces.find(g); it != o.group_interfaces.end()) names = it->second;
    if (names.empty()) {
      Result<std::vector<std::string>> defaults = engine::default_interfaces(o.provider);
      if (!defaults.ok()) return defaults.status();
      names = *defaults;
    }
    if (names.empty()) return not_found("provider '" + o.provider + "' offers no domain");
    for (size_t d = 0; d < o.domains_per_group; ++d) core.groups[g].push_back({o.provider, names[d % names.size()], g, d});
  }
  engine::BackendOptions backend;
  backend.want_hmem = gpu::kHaveCuda && o.gpu_memory_on_nic;
  gpu::parse_gpu_copy_mode(o.ipc_gpu_copies.c_str(), &backend.ipc_copies.mode);
  backend.ipc_copies.launcher_copies = o.ipc_launcher_copies;
  backend.ipc_copies.min_launch_warps = o.ipc_min_launch_warps;
  backend.ipc_copies.loads_per_lane = o.ipc_loads_per_lane;
  backend.ipc_copies.streams_per_device = o.ipc_copy_streams;
  backend.reorder_seed = o.reorder_seed;
  backend.want_wait_fd = o.core.idle_policy != IdlePolicy::kSpin;
  backend.decorate = o.decorate_domains;
  core.open_domain = engine::make_backend_factory(std::move(backend));
  Result<std::unique_ptr<TransferEngine::Impl>> impl = TransferEngine::Impl::start(std::move(core), o.metrics_endpoint);
  if (!impl.ok()) return impl.status();
  return std::unique_ptr<TransferEngine>(new TransferEngine(std::move(impl).value()));
}

void BuilderAccess::set_domain_decorator(TransferEngineBuilder& builder, DomainDecorator decorate) {
  builder.options_->decorate_domains = std::move(decorate);
}

}  // namespace fabric_lib

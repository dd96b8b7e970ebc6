// The settings a TransferEngineBuilder records (fabric_lib/engine_builder.h), before validation.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/engine_options.h"
#include "engine/backend_factory.h"
#include "fabric_lib/engine_builder.h"

namespace fabric_lib {

struct TransferEngineBuilder::Options {
  std::string provider = "tcp";
  size_t domains_per_group = 1;
  size_t groups = 1;
  std::vector<std::string> interfaces;
  std::map<size_t, std::vector<std::string>> group_interfaces;
  bool gpu_memory_on_nic = true;     // FI_HMEM where the provider offers it (CUDA builds)
  std::string ipc_gpu_copies = "auto";
  size_t ipc_launcher_copies = gpu::kDefaultLauncherCopies;
  size_t ipc_min_launch_warps = 0;  // environment only (diagnosis): FABRIC_LIB_IPC_LAUNCH_WARPS
  uint32_t ipc_loads_per_lane = gpu::kDefaultCopyLoadsPerLane;  // environment only (diagnosis): FABRIC_LIB_IPC_COPY_LOADS
  size_t ipc_copy_streams = gpu::GpuCopySettings{}.streams_per_device;  // environment only: FABRIC_LIB_IPC_COPY_STREAMS
  uint64_t reorder_seed = 0;
  std::string metrics_endpoint;      // "" = no Prometheus endpoint
  // Everything the core takes as it is (groups, open_domain and the backend come from the above).
  detail::EngineOptions core;
  // Tests only (engine/builder_testing.h): wraps every domain the backend factory opens.
  std::function<std::unique_ptr<transport::Domain>(std::unique_ptr<transport::Domain>)> decorate_domains;
};

}  // namespace fabric_lib

// The backend factory: the one place that knows every backend. It turns a DomainSpec into a
// Domain of the right backend (libfabric for any libfabric provider, the same-host IPC backend
// for "ipc"/"nvlink") with the decorators the engine's settings ask for (GPU staging on libfabric
// domains of CUDA builds, the test-only reordering wrapper), and hands core a DomainFactory.
// Settings arrive as values: environment overrides were read once, by the builder.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gpu/copy_mode.h"
#include "transport/domain_factory.h"

namespace fabric_lib::engine {

struct BackendOptions {
  // Ask libfabric providers for FI_HMEM (CUDA builds; off: GPU sources are always staged).
  bool want_hmem = false;
  // How the IPC backend copies into GPU memory.
  gpu::GpuCopySettings ipc_copies;
  // Completion queues with a wait object to block on (adaptive idle); false: FI_WAIT_NONE (spin).
  bool want_wait_fd = true;
  // != 0: wrap every domain in a ReorderingDomain seeded from this, the group and the index.
  uint64_t reorder_seed = 0;
  // Tests: applied to every opened domain, after the other decorators.
  std::function<std::unique_ptr<transport::Domain>(std::unique_ptr<transport::Domain>)> decorate;
};

transport::DomainFactory make_backend_factory(BackendOptions options);

// True for the provider strings of the same-host IPC backend ("ipc", and its alias "nvlink").
bool is_ipc_provider(const std::string& provider);

// NIC names to use by default for `provider`, in order: every RDMA device for efa/verbs, the
// first non-loopback interface for socket providers (loopback only when nothing else exists),
// one name for the IPC backend.
Result<std::vector<std::string>> default_interfaces(const std::string& provider);

}  // namespace fabric_lib::engine

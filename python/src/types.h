// Value types shared by the bindings: what a MemoryRegionHandle, PageIndices, ScatterTarget and
// PeerGroup hold on the C++ side.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "fabric_lib/memory.h"
#include "fabric_lib/fabric_lib.h"

namespace fabric_lib::python {

namespace py = pybind11;

// A local registration as Python sees it. `engine_serial` names the engine that made it, so a
// handle used with another engine is rejected instead of aliasing that engine's ids.
struct PyMrHandle {
  MrHandle handle;
  uint64_t engine_serial = 0;
  uintptr_t ptr = 0;
  uint64_t length = 0;
  MemoryKind kind = MemoryKind::kHost;
  Access access = Access::kLocalOnly;
};

// Page numbers for submit_paged_writes.
struct PyPageIndices {
  std::vector<uint32_t> indices;
};

// One destination of submit_scatter: either a descriptor, or an index into a PeerGroup.
struct PyScatterTarget {
  uint64_t length = 0;
  uint64_t src_offset = 0;
  uint64_t dst_offset = 0;
  std::optional<MrDesc> dst;
  uint32_t peer = 0;
};

// A PeerGroup with the serial of the engine that resolved it.
struct PyPeerGroup {
  PeerGroup group;
  uint64_t engine_serial = 0;
};

// Binds DomainAddress, MemoryRegionDescriptor, MemoryRegionHandle, PageIndices, ScatterTarget,
// PeerGroup and the imm_count_of_* functions.
void bind_types(py::module_& m);

// The route for an optional shard count (None: all domains) or pinned domain.
Route route_of(std::optional<uint32_t> num_shards, std::optional<uint32_t> domain);

}  // namespace fabric_lib::python

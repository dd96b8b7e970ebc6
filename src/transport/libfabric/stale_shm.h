// libfabric 1.17's shm provider names each endpoint's shared-memory region "<pid>:<n>:<m>" in
// /dev/shm and never removes it when its process dies (kill -9, crash). A later process that is
// given the same pid (pid_max is often 32768) then cannot open its shm endpoint: fi_enable fails
// with EBUSY. Such a region is stale for sure when it is named after our pid and is older than our
// process (no live process can have our pid, and our own regions are younger than us).
#pragma once

#include <cstddef>

namespace fabric_lib::transport::libfabric {

// Unlinks the stale shm regions named after this process's pid; returns how many.
size_t remove_stale_shm_regions();

}  // namespace fabric_lib::transport::libfabric

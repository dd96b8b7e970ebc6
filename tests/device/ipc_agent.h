// GPU peers for the ipc device tests. device_tests re-executes itself as an agent (the one agent of
// support/agent.h); for provider "ipc" the agent's target region is GPU memory — cudaMalloc'd on
// tools::peer_gpu(), registered at an odd offset inside its allocation so that the IPC export of a
// sub-allocation is exercised — and two commands join the common table:
//   flag_check <imm> <n> <seed> <bytes>  a kernel waits for the GPU flag that expect(imm, n) sets,
//                                        then checks the region's first bytes against pattern seed
//   flag_result                          waits for that kernel: "<outcome> <mismatches> <first>"
#pragma once

#include "common/cuda_region.h"
#include "device_support.h"

namespace fabric_lib::device_tests {

using tools::peer_gpu;

// The ipc configuration of the device tests, `domains` per group.
inline testing::ProviderConfig ipc_config(size_t domains) {
  return {"ipc_" + std::to_string(domains) + "dom", "ipc", "", domains, 0};
}

// The agent process's entry point (argv after "--fabric-agent", as testing::run_agent takes).
int run_gpu_agent(int argc, char** argv);

}  // namespace fabric_lib::device_tests

// GPU peers for the nvlink device tests. device_tests re-executes itself as an agent (as the
// integration tests do, support/peer_agent.h); for provider "nvlink" the agent's target region
// is GPU memory — cudaMalloc'd on peer_gpu(), registered at an odd offset inside its allocation
// so that the IPC export of a sub-allocation is exercised — and it answers the same text
// commands as the host agent (expect, count, hash, fill, zero, recvs, messages, send,
// write_burst, burst_status, stop), plus:
//   flag_check <imm> <n> <seed> <bytes>  a kernel waits for the GPU flag that expect(imm, n) sets,
//                                        then checks the region's first bytes against pattern seed
//   flag_result                          waits for that kernel: "<outcome> <mismatches> <first>"
#pragma once

#include "device_support.h"

namespace fabric_lib::device_tests {

// The GPU the peer processes use: 1 when there are two or more GPUs (GPU0 <-> GPU1 over NVLink),
// else 0 (two processes sharing GPU 0).
int peer_gpu();

// The nvlink configuration of the device tests, `domains` per group.
inline testing::ProviderConfig nvlink_config(size_t domains) {
  return {"nvlink_" + std::to_string(domains) + "dom", "nvlink", "", domains, 0};
}

// The agent process's entry point (argv after "--fabric-agent", as testing::run_agent takes).
int run_gpu_agent(int argc, char** argv);

}  // namespace fabric_lib::device_tests

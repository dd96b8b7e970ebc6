// fabric-bench --provider ipc (CUDA builds, GPU machines): single and paged WRITEs from GPU 0
// into GPU memory of a local target process (on GPU 1 when there are two GPUs, else GPU 0), each
// point verified at the target (bytes and imm counts) and measured against
// cudaMemcpyPeerAsync of the same bytes in this process (the NVLink ceiling; GPU 0 to GPU 0 with
// one GPU), with the same window of requests in flight; paged writes optionally once per GPU copy
// mode (--copy-modes memcpy,batch,kernel: FABRIC_LIB_NVLINK_COPY); and imm round trips (p50/p99).
// The raw columns of the table and CSV are the cudaMemcpyPeerAsync baseline.
#pragma once

#include <string>

#include "common/control_channel.h"
#include "fabric_bench/options.h"

namespace fabric_lib::bench {

// The initiator's side (only with --local: ipc connects processes of one host). Exit code.
int run_ipc_bench(const BenchOptions& options, const std::string& argv0);

// The local target of that run (started by it with --serve-fd ... --provider ipc). Exit code.
int serve_ipc_target(tools::ControlChannel channel);

}  // namespace fabric_lib::bench

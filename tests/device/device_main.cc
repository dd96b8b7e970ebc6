// The GPU test binary: GoogleTest by default; "--fabric-agent ..." is a peer agent process
// (support/peer_agent.h, started by the tests themselves; for provider ipc its region is GPU
// memory, ipc_agent.h); "--bench-watcher CSV" and
// "--bench-staging CSV" run the benchmarks (benchmarks.h) instead of the tests.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "benchmarks.h"
#include "ipc_agent.h"
#include "support/agent.h"
#include "support/peer_agent.h"

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "--fabric-agent") == 0) {
    if (argc >= 4 && std::strcmp(argv[3], "ipc") == 0) return fabric_lib::device_tests::run_gpu_agent(argc - 2, argv + 2);
    return fabric_lib::testing::run_agent(argc - 2, argv + 2);
  }
  if (argc == 3 && std::strcmp(argv[1], "--bench-watcher") == 0) {
    return fabric_lib::device_tests::run_watcher_benchmark(argv[2]);
  }
  if (argc == 3 && std::strcmp(argv[1], "--bench-staging") == 0) {
    return fabric_lib::device_tests::run_staging_benchmark(argv[2]);
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

// Test main: runs GoogleTest, or, with --fabric-agent, a peer agent process (support/peer_agent.h).
#include <gtest/gtest.h>

#include <cstring>

#include "support/agent.h"
#include "support/peer_agent.h"

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "--fabric-agent") == 0) {
    return fabric_lib::testing::run_agent(argc - 2, argv + 2);
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

// Test main: runs GoogleTest, or, with --kv-agent, a KV role in an agent process.
#include <gtest/gtest.h>

#include <cstring>

#include "support/kv_agent.h"

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "--kv-agent") == 0) return fabric_lib::kv::testing::run_kv_agent(argc - 2, argv + 2);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

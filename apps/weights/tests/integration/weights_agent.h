// Trainer and inference ranks in separate processes for the weights integration tests. The test
// binary re-executes itself with --weights-agent; the agent owns an engine and a TrainerEndpoint or
// InferenceEndpoint over the test model (support/test_model.h) and answers text commands:
//   trainer:   "send V" (fill the shards with step V's weights, send(V)) -> "ok ..." | "error CODE MSG"
//              "partial V" (write about half of its step-V writes by hand, then kill -9 itself)
//   inference: "wait V MS" (wait_for_version, then compare every byte with the reference load)
//              -> "ok" | "mismatch TENSOR" | "error CODE MSG"
//   both:      "exit"
// After start it connects and reports "connected FINGERPRINT" or "connect-error CODE MSG".
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "common/control_channel.h"

namespace fabric_lib::weights::testing {

struct AgentSpec {
  std::string role;       // "trainer" | "inference"
  uint32_t rank = 0, world = 1;
  std::string provider = "tcp";
  size_t domains = 1;
  bool fp8 = false;
  std::string controller_hex;
  uint64_t step_timeout_ms = 20000;
  std::string variant = "normal";  // "missing_source" (inference), "bad_shape" (trainer rank 1)
};

int run_weights_agent(int argc, char** argv);

// The test's handle on one agent process.
class WeightsAgent {
 public:
  explicit WeightsAgent(const AgentSpec& spec);
  ~WeightsAgent();  // "exit", then SIGKILL if it does not go
  WeightsAgent(const WeightsAgent&) = delete;
  WeightsAgent& operator=(const WeightsAgent&) = delete;

  bool send(const std::string& line) { return channel_.send(line); }
  std::string recv(std::chrono::milliseconds timeout);  // "<no reply>" on timeout
  pid_t pid() const { return pid_; }
  // Waits for the process to end; its wait status, or -1 on timeout.
  int wait_exit(std::chrono::milliseconds timeout);

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  int status_ = -1;
  tools::ControlChannel channel_;
};

}  // namespace fabric_lib::weights::testing

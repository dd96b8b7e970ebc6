// A KV role in another process: the test binary re-executes itself with --kv-agent; the agent
// hosts a PrefillHost or DecodeHost and answers text commands over a control channel, so a test
// can run several ranks, kill -9 either side, and check what the other side saw.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "common/control_channel.h"
#include "support/kv_host.h"

namespace fabric_lib::kv::testing {

enum class AgentRole { kPrefill, kDecode };

// Entry point of the agent process: argv after "--kv-agent" (fd, role, config).
int run_kv_agent(int argc, char** argv);

class KvAgent {
 public:
  static constexpr std::chrono::milliseconds kTimeout{30000};
  KvAgent(AgentRole role, const HostConfig& config);
  ~KvAgent();  // asks the agent to exit; kills it if it does not
  KvAgent(const KvAgent&) = delete;
  KvAgent& operator=(const KvAgent&) = delete;

  bool started() const { return !address_.empty(); }
  const DomainAddress& address() const { return address_; }
  pid_t pid() const { return pid_; }
  std::string call(const std::string& command, std::chrono::milliseconds timeout = kTimeout);
  void kill9();

 private:
  pid_t pid_ = -1;
  tools::ControlChannel channel_;
  DomainAddress address_;
};

// "1,2,3" <-> {1, 2, 3} ("-" is empty).
std::string join(const std::vector<uint32_t>& v);
std::vector<uint32_t> split_u32(const std::string& s);

}  // namespace fabric_lib::kv::testing

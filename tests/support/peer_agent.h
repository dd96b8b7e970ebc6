// Test peers in separate processes: the provider matrix, and the test's handle on one agent
// process. The test binary re-executes itself in "agent" mode (integration_main.cc,
// device_main.cc); the agent's side is support/agent.h.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <ostream>
#include <cstdint>
#include <string>
#include <vector>

#include "common/control_channel.h"
#include "fabric_lib/fabric_lib.h"
#include "support/bounds.h"

namespace fabric_lib::testing {

// One provider configuration of the integration matrix.
struct ProviderConfig {
  std::string name;       // test-name suffix
  std::string provider;   // libfabric provider string
  std::string interface_name;  // "" = provider default; "a,b,c" names one per domain
  size_t domains = 1;
  uint64_t reorder_seed = 0;   // != 0: simulate_unordered_network
  uint64_t stall_timeout_ms = 0;  // != 0: the engine's stall_timeout (the agent's too)

  TransferEngineBuilder builder() const;
  // Writes complete without the target process's CPU (ipc: the writer copies into the
  // target's memory itself, as an RDMA NIC would), so a paused (SIGSTOP) target holds none up.
  bool writes_bypass_target_cpu() const { return provider == "ipc"; }
};

// How GoogleTest prints a configuration in failure messages.
inline void PrintTo(const ProviderConfig& c, std::ostream* os) { *os << c.name; }

// The matrix of DESIGN.md section 8: tcp, shm, udp;ofi_rxd, tcp under the reordering wrapper,
// and ipc (on host memory), each with 1 and 4 domains per group.
std::vector<ProviderConfig> provider_matrix();

// The test's handle on one agent process.
class AgentProcess {
 public:
  static constexpr std::chrono::milliseconds kTimeout = bounds::kAgentCall;

  AgentProcess(const ProviderConfig& config, size_t region_bytes);
  ~AgentProcess();  // asks the agent to exit; kills it if it does not
  AgentProcess(const AgentProcess&) = delete;
  AgentProcess& operator=(const AgentProcess&) = delete;

  bool started() const { return !desc_.empty(); }
  const MrDesc& desc() const { return desc_; }  // the agent's target region
  const DomainAddress& address() const { return address_; }
  pid_t pid() const { return pid_; }

  // Sends one command and returns the reply ("<no reply>" on timeout or a dead agent).
  std::string call(const std::string& command, std::chrono::milliseconds timeout = kTimeout);
  // FNV-1a of the agent's region bytes [offset, offset + length), as the agent computes it.
  std::string hash(uint64_t offset, uint64_t length);
  // FNV-1a of the agent's region bytes read directly from its memory (process_vm_readv), with no
  // round trip through the agent: what the region holds at this very moment, e.g. inside a
  // completion callback. Host-memory regions only; "<unreadable: ...>" when the read fails.
  std::string hash_now(uint64_t offset, uint64_t length) const;
  // Waits until the agent's ImmCounter has seen `n` of `imm` (an expectation set in the agent).
  bool expect_imms(uint32_t imm, uint64_t n, std::chrono::milliseconds timeout = bounds::kRequests);
  // Exactly n of `imm`: n arrive (and are consumed) within `timeout`, and none more during
  // bounds::kQuiet after. "ok", or what went wrong.
  std::string expect_exactly(uint32_t imm, uint64_t n, std::chrono::milliseconds timeout = bounds::kRequests);
  // Whether the count of `imm` stays `count` for `interval` ("ok", or "changed count=<c>").
  std::string quiet(uint32_t imm, uint64_t count, std::chrono::milliseconds interval = bounds::kQuiet);
  uint64_t count(uint32_t imm);
  // Waits until the count of `imm` reaches `n` without an expectation (early arrivals).
  bool wait_count(uint32_t imm, uint64_t n, std::chrono::milliseconds timeout = bounds::kRequests);
  // The agent engine's stats that tests check (EngineStats).
  struct Stats {
    uint64_t wrs_posted = 0, unordered_windows_shuffled = 0, unordered_events_held = 0, imms_received = 0;
  };
  Stats stats();
  void kill_now();
  // SIGSTOP / SIGCONT, returning once the process is really stopped (or running again).
  bool pause();
  bool resume();
  // Whether the process is stopped right now (/proc/<pid>/stat state 'T').
  bool stopped() const;

 private:
  pid_t pid_ = -1;
  tools::ControlChannel channel_;
  MrDesc desc_;
  DomainAddress address_;
};

// Hex FNV-1a of bytes, matching AgentProcess::hash (tools::fnv1a_hex).
std::string hash_hex(const uint8_t* p, size_t n);
// hash_hex of the `len` pattern bytes of `seed` (tools::fill_pattern), then ":" and `len`: how a
// test names a message it sends, to match it against the one that arrived.
std::string message_hash(uint64_t seed, size_t len);

}  // namespace fabric_lib::testing

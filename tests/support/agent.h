// The agent process of the multi-process tests: it owns a TransferEngine and a registered target
// region (host memory in the integration tests, GPU memory in the device tests: a tools::Region)
// and answers text commands over a control channel from one command table, so tests check bytes
// and imm counts in another process. Commands (one per message; replies "ok ...", "error ...",
// or the value asked for):
//   expect <imm> <n> <timeout_ms>        wait for n imms of imm: "ok" | "timeout count=<c>" | "failed"
//   count <imm>                          the count of imm
//   quiet <imm> <count> <ms>             "ok" when imm's count stays <count> for ms, else "changed count=<c>"
//   stats                                "<wrs_posted> <unordered_windows_shuffled> <unordered_events_held> <imms_received>"
//   hash <offset> <length>               FNV-1a hex of region bytes
//   fill <seed> | zero                   the region holds pattern <seed> / zeros
//   recvs <count> <max_len>              post receive buffers; messages are hashed on arrival
//   messages <n> <timeout_ms>            wait for n messages: "ok|timeout <hash:len>..."
//   send <addr_hex> <count> <len> <seed> send count pattern messages, wait for each one's completion
//                                        (exactly once, checked over a quiet interval)
//   write_burst <desc_hex> <count> <chunk> <imm>   submit count writes from the region
//   burst_status                         "<finished> <exactly_once 0|1> <code>=<n> ..."
//   metrics_endpoint                     the engine's Prometheus endpoint "host:port", or "none"
//   stop                                 engine->stop()
// Request forms (agent_forms.cc):
//   every <imm> <n> <counter|callback|flag>   imms().expect_every(imm, n, sink of that kind)
//   every_status <imm>                   "<rounds(imm)> <count(imm)> <sink rounds> <ends> <in_order 0|1> <end code>"
//   wait_rounds <imm> <r> <timeout_ms>   until the sink saw r rounds: "ok" | "timeout <sink rounds>"
//   wait_count <imm> <n> <timeout_ms>    until count(imm) >= n (no expectation): "ok <c>" | "timeout <c>"
//   release <imm>                        imms().release(imm)
//   recvs_into <offset> <slot> <count>   post_recvs_into the region; messages are hashed where they landed
//   placement                            how many received messages lay outside their slots
//   send_from <addr_hex> <count> <len> <seed> <offset>   zero-copy sends from the region at offset,
//                                        each refilled (pattern seed + i) only after the previous completed
// plus any commands the test binary adds (AgentSetup::extra_commands).
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/region.h"
#include "fabric_lib/fabric_lib.h"

namespace fabric_lib::testing {

class Agent {
 public:
  using Words = std::vector<std::string>;
  using Handler = std::function<std::string(Agent& agent, const Words& words)>;
  struct Command {
    std::string name;
    size_t words = 0;  // including the name
    Handler run;
  };

  Agent(std::unique_ptr<TransferEngine> engine, std::unique_ptr<tools::Region> region, MrRegistration reg,
        std::vector<Command> extra_commands);
  ~Agent();  // stops the engine before the region goes

  // Runs one command line's words through the table.
  std::string handle(const Words& words);

  TransferEngine& engine() { return *engine_; }
  tools::Region& region() { return *region_; }
  const MrRegistration& registration() const { return reg_; }

 private:
  std::string expect(const Words& w);
  std::string quiet(const Words& w);
  std::string recvs(const Words& w);
  std::string messages(const Words& w);
  std::string send(const Words& w);
  std::string write_burst(const Words& w);
  std::string burst_status();
  // Request forms (agent_forms.cc).
  struct EveryState;
  std::vector<Command> form_commands();
  std::string every(const Words& w);
  std::string every_status(const Words& w);
  std::string wait_rounds(const Words& w);
  std::string wait_count(const Words& w);
  std::string recvs_into(const Words& w);
  std::string send_from(const Words& w);
  std::shared_ptr<EveryState> every_state(uint32_t imm);

  std::unique_ptr<TransferEngine> engine_;
  std::unique_ptr<tools::Region> region_;
  MrRegistration reg_;
  std::vector<Command> commands_;
  std::mutex mu_;
  std::vector<std::string> message_hashes_;  // arrival order
  std::atomic<size_t> messages_{0};
  // write_burst bookkeeping: calls per request, outcomes by error code name.
  MrRegistration source_;
  std::vector<std::atomic<int>> burst_calls_;
  std::map<std::string, size_t> burst_outcomes_;
  // Repeating expectations by imm; received messages that landed outside their slot.
  std::map<uint32_t, std::shared_ptr<EveryState>> every_;
  std::atomic<size_t> misplaced_{0};
};

// How an agent process is made: its region, and the test binary's own commands.
struct AgentSetup {
  std::function<Result<std::unique_ptr<tools::Region>>(size_t bytes)> make_region = tools::make_host_region;
  std::vector<Agent::Command> extra_commands;
  // Runs at exit after the engine stopped and before the region is freed (work still using it ends).
  std::function<void()> before_exit;
};

// Entry point of the agent process: argv after "--fabric-agent".
int run_agent(int argc, char** argv, const AgentSetup& setup = {});

uint64_t parse_u64(const std::string& text);

}  // namespace fabric_lib::testing

// How fabric-bench reaches its target process: a local child it forks and re-executes
// (--local), or a server on another host over TCP (--server / --connect). Either way the result
// is a ControlChannel carrying text commands (see target.h for the protocol).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "common/control_channel.h"
#include "fabric_lib/status.h"

namespace fabric_lib::bench {

// The initiator's side of the control channel.
class PeerLink {
 public:
  static constexpr std::chrono::milliseconds kDefaultTimeout{120000};

  PeerLink() = default;
  PeerLink(tools::ControlChannel channel, pid_t child) : channel_(std::move(channel)), child_(child) {}
  ~PeerLink();  // says goodbye; waits for (and if needed kills) a local child
  PeerLink(PeerLink&& other) noexcept
      : channel_(std::move(other.channel_)), child_(other.child_), finished_(other.finished_) {
    other.child_ = -1;
    other.finished_ = true;
  }
  PeerLink& operator=(PeerLink&&) = delete;

  // Sends `command` and returns the reply's words after "ok", or the target's error.
  Result<std::vector<std::string>> call(const std::string& command, std::chrono::milliseconds timeout = kDefaultTimeout);
  // Sends without waiting for the reply (read it later with reply()).
  Status send(const std::string& command);
  Result<std::vector<std::string>> reply(std::chrono::milliseconds timeout = kDefaultTimeout);

  // Ends the session; true when a local child exited cleanly (always true for a remote server).
  bool finish();

 private:
  tools::ControlChannel channel_;
  pid_t child_ = -1;
  bool finished_ = false;
};

// Forks and re-executes this program (/proc/self/exe) as a target serving on an inherited socket.
Result<PeerLink> spawn_local_peer(const std::string& argv0, const std::vector<std::string>& extra_args);
// Connects to a `fabric-bench --server` at "host:port".
Result<PeerLink> connect_to_server(const std::string& host_port, std::chrono::milliseconds timeout);
// Listens on "host:port" (host may be empty or 0.0.0.0) and accepts one initiator.
Result<tools::ControlChannel> accept_one(const std::string& host_port, bool announce);

}  // namespace fabric_lib::bench

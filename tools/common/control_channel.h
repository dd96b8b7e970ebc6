// A tiny framed message channel over a stream socket, used to bootstrap local peer processes
// (exchange addresses and descriptors, drive test agents). Every call has a timeout; nothing
// blocks forever.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace fabric_lib::tools {

class ControlChannel {
 public:
  explicit ControlChannel(int fd = -1) : fd_(fd) {}
  ~ControlChannel();
  ControlChannel(ControlChannel&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  ControlChannel& operator=(ControlChannel&& other) noexcept;
  ControlChannel(const ControlChannel&) = delete;
  ControlChannel& operator=(const ControlChannel&) = delete;

  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  bool send(const std::string& message);
  // The next message, or nullopt on timeout, EOF or error.
  std::optional<std::string> recv(std::chrono::milliseconds timeout);

 private:
  bool read_exact(char* p, size_t n, std::chrono::steady_clock::time_point deadline);
  int fd_;
};

// A connected pair (socketpair); the second end is meant for a child process.
std::pair<ControlChannel, ControlChannel> make_channel_pair();

// Runs this program again (/proc/self/exe) in a child process with `args` (args[0] its name),
// keeping `keep_fd` (a channel end) open across exec. Everything the child needs is prepared
// before fork: until exec, the child of a multithreaded process may only make async-signal-safe
// calls (an allocation there deadlocked under ASan on a lock another thread held at the fork).
// Returns the child's pid, or -1 when fork failed. A child whose exec fails exits with 127.
int spawn_self(const std::vector<std::string>& args, int keep_fd);

// Splits on single spaces.
std::vector<std::string> split_words(const std::string& line);

}  // namespace fabric_lib::tools

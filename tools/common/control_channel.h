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

// Splits on single spaces.
std::vector<std::string> split_words(const std::string& line);

}  // namespace fabric_lib::tools

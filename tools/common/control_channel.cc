#include "control_channel.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <sstream>

namespace fabric_lib::tools {

ControlChannel::~ControlChannel() {
  if (fd_ >= 0) close(fd_);
}

ControlChannel& ControlChannel::operator=(ControlChannel&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

bool ControlChannel::send(const std::string& message) {
  if (fd_ < 0) return false;
  const uint64_t n = message.size();
  std::string frame(reinterpret_cast<const char*>(&n), sizeof(n));
  frame += message;
  size_t off = 0;
  while (off < frame.size()) {
    ssize_t w = ::send(fd_, frame.data() + off, frame.size() - off, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    off += static_cast<size_t>(w);
  }
  return true;
}

bool ControlChannel::read_exact(char* p, size_t n, std::chrono::steady_clock::time_point deadline) {
  size_t off = 0;
  while (off < n) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd pfd{fd_, POLLIN, 0};
    int r = poll(&pfd, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    ssize_t got = ::read(fd_, p + off, n - off);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    off += static_cast<size_t>(got);
  }
  return true;
}

std::optional<std::string> ControlChannel::recv(std::chrono::milliseconds timeout) {
  if (fd_ < 0) return std::nullopt;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  uint64_t n = 0;
  if (!read_exact(reinterpret_cast<char*>(&n), sizeof(n), deadline)) return std::nullopt;
  if (n > (uint64_t{1} << 32)) return std::nullopt;
  std::string message(n, '\0');
  if (n > 0 && !read_exact(message.data(), n, deadline)) return std::nullopt;
  return message;
}

std::pair<ControlChannel, ControlChannel> make_channel_pair() {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return {ControlChannel(), ControlChannel()};
  return {ControlChannel(fds[0]), ControlChannel(fds[1])};
}

std::vector<std::string> split_words(const std::string& line) {
  std::vector<std::string> words;
  std::istringstream in(line);
  std::string w;
  while (in >> w) words.push_back(w);
  return words;
}

int spawn_self(const std::vector<std::string>& args, int keep_fd) {
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    fcntl(keep_fd, F_SETFD, 0);  // the channel end survives exec; every other fd is close-on-exec
    execv("/proc/self/exe", argv.data());
    static const char kFailed[] = "spawn_self: exec of /proc/self/exe failed\n";
    (void)!write(2, kFailed, sizeof kFailed - 1);
    _exit(127);
  }
  return pid;
}

}  // namespace fabric_lib::tools

#include "fabric_bench/peer_link.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

namespace fabric_lib::bench {
namespace {

Status sys_error(const std::string& what) { return Status(ErrorCode::kPeerUnreachable, what + ": " + std::strerror(errno)); }

bool split_host_port(const std::string& text, std::string* host, std::string* port) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon + 1 == text.size()) return false;
  *host = text.substr(0, colon);
  *port = text.substr(colon + 1);
  return true;
}

struct AddrInfoDeleter {
  void operator()(addrinfo* a) const { freeaddrinfo(a); }
};

}  // namespace

PeerLink::~PeerLink() { finish(); }

Status PeerLink::send(const std::string& command) {
  if (!channel_.send(command)) return Status(ErrorCode::kPeerUnreachable, "control channel closed (target gone?)");
  return ok_status();
}

Result<std::vector<std::string>> PeerLink::reply(std::chrono::milliseconds timeout) {
  std::optional<std::string> answer = channel_.recv(timeout);
  if (!answer) return Status(ErrorCode::kPeerUnreachable, "no answer from the target (timeout or exit)");
  std::vector<std::string> words = tools::split_words(*answer);
  if (words.empty() || words[0] != "ok") {
    const std::string text = answer->rfind("error ", 0) == 0 ? answer->substr(6) : *answer;
    return Status(ErrorCode::kInternal, "target: " + text);
  }
  words.erase(words.begin());
  return words;
}

Result<std::vector<std::string>> PeerLink::call(const std::string& command, std::chrono::milliseconds timeout) {
  FABRIC_LIB_RETURN_IF_ERROR(send(command));
  return reply(timeout);
}

bool PeerLink::finish() {
  if (finished_) return true;
  finished_ = true;
  if (channel_.valid()) {
    channel_.send("bye");
    channel_.recv(std::chrono::seconds(30));
  }
  channel_ = tools::ControlChannel();
  if (child_ <= 0) return true;
  int status = 0;
  for (int i = 0; i < 300; ++i) {  // up to 30 s for engines to stop
    const pid_t r = waitpid(child_, &status, WNOHANG);
    if (r == child_) return WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (r < 0) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  kill(child_, SIGKILL);
  waitpid(child_, &status, 0);
  return false;
}

Result<PeerLink> spawn_local_peer(const std::string& argv0, const std::vector<std::string>& extra_args) {
  auto [parent_end, child_end] = tools::make_channel_pair();
  if (!parent_end.valid()) return sys_error("socketpair");
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<std::string> args = {argv0, "--serve-fd", std::to_string(child_end.fd())};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  const pid_t pid = tools::spawn_self(args, child_end.fd());
  if (pid < 0) return sys_error("fork");
  child_end = tools::ControlChannel();
  return PeerLink(std::move(parent_end), pid);
}

Result<PeerLink> connect_to_server(const std::string& host_port, std::chrono::milliseconds timeout) {
  std::string host, port;
  if (!split_host_port(host_port, &host, &port)) return invalid_argument("--connect wants HOST:PORT, got " + host_port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int r = getaddrinfo(host.c_str(), port.c_str(), &hints, &found); r != 0) {
    return Status(ErrorCode::kPeerUnreachable, "cannot resolve " + host_port + ": " + gai_strerror(r));
  }
  std::unique_ptr<addrinfo, AddrInfoDeleter> list(found);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  // The server may still be starting: retry until the deadline.
  while (true) {
    for (addrinfo* a = list.get(); a; a = a->ai_next) {
      const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        return PeerLink(tools::ControlChannel(fd), -1);
      }
      close(fd);
    }
    if (std::chrono::steady_clock::now() >= deadline) return sys_error("connect to " + host_port);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

Result<tools::ControlChannel> accept_one(const std::string& host_port, bool announce) {
  std::string host, port;
  if (!split_host_port(host_port, &host, &port)) return invalid_argument("--listen wants [HOST]:PORT, got " + host_port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (int r = getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &found); r != 0) {
    return Status(ErrorCode::kInvalidArgument, "cannot resolve " + host_port + ": " + gai_strerror(r));
  }
  std::unique_ptr<addrinfo, AddrInfoDeleter> list(found);
  for (addrinfo* a = list.get(); a; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 1) != 0) {
      close(fd);
      continue;
    }
    if (announce) std::fprintf(stderr, "fabric-bench: server listening on %s\n", host_port.c_str());
    const int conn = accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
    close(fd);
    if (conn < 0) return sys_error("accept");
    setsockopt(conn, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return tools::ControlChannel(conn);
  }
  return sys_error("listen on " + host_port);
}

}  // namespace fabric_lib::bench

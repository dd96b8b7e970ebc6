#include "transport/ipc/process_identity.h"

#include <poll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>

namespace fabric_lib::transport::ipc {
namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

Result<std::string> read_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return not_found("cannot read " + path);
  return line;
}

}  // namespace

Result<BootId> parse_boot_id(const std::string& text) {
  BootId id{};
  size_t n = 0;
  int high = -1;
  for (char c : text) {
    if (c == '-' || c == '\n') continue;
    const int v = hex_value(c);
    if (v < 0 || n >= id.size()) return malformed("boot id '" + text + "' is not a UUID");
    if (high < 0) {
      high = v;
    } else {
      id[n++] = static_cast<uint8_t>(high << 4 | v);
      high = -1;
    }
  }
  if (n != id.size() || high >= 0) return malformed("boot id '" + text + "' is not a UUID");
  return id;
}

std::string boot_id_text(const BootId& id) {
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < id.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    out += kHex[id[i] >> 4];
    out += kHex[id[i] & 15];
  }
  return out;
}

Result<uint64_t> process_start_time(uint32_t pid) {
  if (pid == 0) return invalid_argument("pid 0");
  Result<std::string> line = read_line("/proc/" + std::to_string(pid) + "/stat");
  if (!line.ok()) return not_found("process " + std::to_string(pid) + " does not exist");
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so parse after the last ')'.
  const size_t paren = line->rfind(')');
  if (paren == std::string::npos) return malformed("unexpected /proc/" + std::to_string(pid) + "/stat");
  std::istringstream rest(line->substr(paren + 1));
  std::string field;
  // Fields after comm start at 3 (state); start time is field 22.
  for (int i = 3; i <= 22; ++i) {
    if (!(rest >> field)) return malformed("short /proc/" + std::to_string(pid) + "/stat");
    if (i == 3 && (field == "Z" || field == "X")) return not_found("process " + std::to_string(pid) + " has exited");
  }
  try {
    return static_cast<uint64_t>(std::stoull(field));
  } catch (...) {
    return malformed("bad start time in /proc/" + std::to_string(pid) + "/stat");
  }
}

bool process_alive(uint32_t pid, uint64_t start_time) {
  Result<uint64_t> t = process_start_time(pid);
  return t.ok() && *t == start_time;
}

int open_process_watch(uint32_t pid, uint64_t start_time) {
#ifdef SYS_pidfd_open
  const int fd = static_cast<int>(syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0));
  if (fd < 0) return -1;
  // The pid may have been reused between the address being made and now: check after opening.
  if (!process_alive(pid, start_time)) {
    close(fd);
    return -1;
  }
  return fd;
#else
  (void)pid;
  (void)start_time;
  return -1;
#endif
}

bool watched_process_exited(int watch_fd) {
  pollfd p{watch_fd, POLLIN, 0};
  return poll(&p, 1, 0) > 0;  // a pidfd becomes readable when its process exits
}

Result<ProcessIdentity> self_identity() {
  static std::mutex mu;
  static bool have_host = false;
  static BootId boot{};
  static uint64_t pid_ns = 0;
  static ProcessIdentity cached;
  std::lock_guard lock(mu);
  if (!have_host) {
    Result<std::string> text = read_line("/proc/sys/kernel/random/boot_id");
    if (!text.ok()) return unsupported("the ipc domain needs /proc/sys/kernel/random/boot_id: " + text.status().message());
    Result<BootId> id = parse_boot_id(*text);
    if (!id.ok()) return id.status();
    struct stat st{};
    if (stat("/proc/self/ns/pid", &st) != 0) {
      return unsupported(std::string("the ipc domain needs /proc/self/ns/pid: ") + std::strerror(errno));
    }
    boot = *id;
    pid_ns = static_cast<uint64_t>(st.st_ino);
    have_host = true;
  }
  const uint32_t pid = static_cast<uint32_t>(getpid());
  if (cached.pid != pid) {  // first call, or a forked child
    Result<uint64_t> start = process_start_time(pid);
    if (!start.ok()) return start.status();
    cached.boot_id = boot;
    cached.pid_namespace = pid_ns;
    cached.pid = pid;
    cached.start_time = *start;
  }
  return cached;
}

}  // namespace fabric_lib::transport::ipc

#include "support/peer_agent.h"

#include <signal.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "common/pattern.h"

namespace fabric_lib::testing {

TransferEngineBuilder ProviderConfig::builder() const {
  TransferEngineBuilder b;
  b.provider(provider).domains_per_group(domains).simulate_unordered_network(reorder_seed);
  if (!interface_name.empty()) {  // comma-separated: domain i uses entry i
    std::vector<std::string> names;
    size_t start = 0;
    while (start <= interface_name.size()) {
      const size_t comma = interface_name.find(',', start);
      names.push_back(interface_name.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    b.interfaces(names);
  }
  if (stall_timeout_ms) b.stall_timeout(std::chrono::milliseconds(stall_timeout_ms));
  return b;
}

std::vector<ProviderConfig> provider_matrix() {
  std::vector<ProviderConfig> m;
  for (size_t d : {1, 4}) {
    const std::string suffix = "_" + std::to_string(d) + "dom";
    m.push_back({"tcp" + suffix, "tcp", "lo", d, 0});
    m.push_back({"shm" + suffix, "shm", "", d, 0});
    m.push_back({"udp_rxd" + suffix, "udp;ofi_rxd", "lo", d, 0});
    m.push_back({"tcp_reordered" + suffix, "tcp", "lo", d, 0x5eed + d});
    m.push_back({"ipc" + suffix, "ipc", "", d, 0});  // host memory, copied with process_vm_writev
  }
  return m;
}

std::string hash_hex(const uint8_t* p, size_t n) { return tools::fnv1a_hex(p, n); }

std::string message_hash(uint64_t seed, size_t len) {
  std::vector<uint8_t> m(len);
  tools::fill_pattern(m.data(), len, seed);
  return hash_hex(m.data(), len) + ":" + std::to_string(len);
}

// --- test side --------------------------------------------------------------------------------

AgentProcess::AgentProcess(const ProviderConfig& config, size_t region_bytes) {
  auto [mine, theirs] = tools::make_channel_pair();
  const int child_fd = theirs.fd();
  std::vector<std::string> args = {"integration_tests", "--fabric-agent", std::to_string(child_fd), config.provider,
                                   config.interface_name.empty() ? "-" : config.interface_name,
                                   std::to_string(config.domains), std::to_string(config.reorder_seed),
                                   std::to_string(region_bytes), std::to_string(config.stall_timeout_ms)};
  pid_ = tools::spawn_self(args, child_fd);
  channel_ = std::move(mine);
  if (pid_ < 0) return;
  auto hello = channel_.recv(kTimeout);
  if (!hello) return;
  auto words = tools::split_words(*hello);
  if (words.size() != 3 || words[0] != "hello") {
    std::fprintf(stderr, "agent failed to start: %s\n", hello->c_str());
    return;
  }
  auto address = DomainAddress::from_hex(words[1]);
  auto desc = MrDesc::from_hex(words[2]);
  if (address.ok() && desc.ok()) {
    address_ = *address;
    desc_ = *desc;
  }
}

AgentProcess::~AgentProcess() {
  if (pid_ <= 0) return;
  channel_.send("exit");
  for (int i = 0; i < 1000; ++i) {  // up to ~10 s
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
}

namespace {
// The state letter of /proc/<pid>/stat ('T' when stopped).
char process_state(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() ? line[paren + 2] : '?';
}
}  // namespace

bool AgentProcess::pause() {
  if (pid_ <= 0 || kill(pid_, SIGSTOP) != 0) return false;
  for (int i = 0; i < 1000; ++i) {
    if (process_state(pid_) == 'T') return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

bool AgentProcess::stopped() const { return pid_ > 0 && process_state(pid_) == 'T'; }

bool AgentProcess::resume() {
  if (pid_ <= 0 || kill(pid_, SIGCONT) != 0) return false;
  for (int i = 0; i < 1000; ++i) {
    if (process_state(pid_) != 'T') return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

void AgentProcess::kill_now() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

std::string AgentProcess::call(const std::string& command, std::chrono::milliseconds timeout) {
  if (!channel_.send(command)) return "<no reply>";
  auto reply = channel_.recv(timeout);
  return reply ? *reply : "<no reply>";
}

std::string AgentProcess::hash(uint64_t offset, uint64_t length) {
  return call("hash " + std::to_string(offset) + " " + std::to_string(length));
}

std::string AgentProcess::hash_now(uint64_t offset, uint64_t length) const {
  if (pid_ <= 0 || desc_.empty() || offset > desc_.length() || length > desc_.length() - offset) return "<unreadable: range>";
  // Last chunk first: a copy still running (front to back, as copies and NICs go) is caught at
  // its unwritten end before it can get there.
  constexpr uint64_t kChunk = 1 << 20;
  std::vector<uint8_t> bytes(length);
  for (uint64_t end = length; end > 0;) {
    const uint64_t start = end > kChunk ? end - kChunk : 0;
    uint64_t done = start;
    while (done < end) {
      iovec local{bytes.data() + done, end - done};
      iovec remote{reinterpret_cast<void*>(desc_.ptr() + offset + done), end - done};
      const ssize_t n = process_vm_readv(pid_, &local, 1, &remote, 1, 0);
      if (n <= 0) return std::string("<unreadable: ") + std::strerror(errno) + ">";
      done += static_cast<uint64_t>(n);
    }
    end = start;
  }
  return hash_hex(bytes.data(), bytes.size());
}

bool AgentProcess::expect_imms(uint32_t imm, uint64_t n, std::chrono::milliseconds timeout) {
  return call("expect " + std::to_string(imm) + " " + std::to_string(n) + " " + std::to_string(timeout.count()),
              timeout + kTimeout) == "ok";
}

std::string AgentProcess::expect_exactly(uint32_t imm, uint64_t n, std::chrono::milliseconds timeout) {
  const std::string reply = call("expect " + std::to_string(imm) + " " + std::to_string(n) + " " + std::to_string(timeout.count()),
                                 timeout + kTimeout);
  if (reply != "ok") return "expect " + std::to_string(n) + " of imm " + std::to_string(imm) + ": " + reply;
  const std::string after = quiet(imm, 0);
  return after == "ok" ? after : "imm " + std::to_string(imm) + " after its " + std::to_string(n) + ": " + after;
}

std::string AgentProcess::quiet(uint32_t imm, uint64_t count, std::chrono::milliseconds interval) {
  return call("quiet " + std::to_string(imm) + " " + std::to_string(count) + " " + std::to_string(interval.count()),
              interval + kTimeout);
}

bool AgentProcess::wait_count(uint32_t imm, uint64_t n, std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  uint64_t c = count(imm);
  while (c < n && c != UINT64_MAX && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    c = count(imm);
  }
  return c >= n && c != UINT64_MAX;
}

AgentProcess::Stats AgentProcess::stats() {
  Stats s;
  auto words = tools::split_words(call("stats"));
  if (words.size() != 4) return s;
  try {
    s = {std::stoull(words[0]), std::stoull(words[1]), std::stoull(words[2]), std::stoull(words[3])};
  } catch (...) {
  }
  return s;
}

uint64_t AgentProcess::count(uint32_t imm) {
  std::string r = call("count " + std::to_string(imm));
  try {
    return std::stoull(r);
  } catch (...) {
    return UINT64_MAX;
  }
}

}  // namespace fabric_lib::testing

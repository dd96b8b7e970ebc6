#include "support/peer_agent.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
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
    m.push_back({"nvlink" + suffix, "nvlink", "", d, 0});  // host memory, copied with process_vm_writev
  }
  return m;
}

std::string hash_hex(const uint8_t* p, size_t n) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(tools::fnv1a(p, n)));
  return buf;
}

// --- agent side -------------------------------------------------------------------------------

namespace {

struct Agent {
  std::unique_ptr<TransferEngine> engine;
  std::vector<uint8_t> region;
  MrRegistration reg;
  std::mutex mu;
  std::vector<std::string> message_hashes;  // arrival order
  std::atomic<size_t> messages{0};
  std::map<uint32_t, std::unique_ptr<CompletionCounter>> expectations;
  // write_burst bookkeeping: calls per request, outcomes by error code name.
  MrRegistration source;
  std::vector<std::atomic<int>> burst_calls;
  std::map<std::string, size_t> burst_outcomes;

  std::string handle(const std::vector<std::string>& w);
};

uint64_t num(const std::string& s) { return std::stoull(s); }

std::string Agent::handle(const std::vector<std::string>& w) {
  const std::string& cmd = w[0];
  if (cmd == "expect" && w.size() == 4) {  // expect <imm> <n> <timeout_ms>
    CompletionCounter c;
    Status s = engine->imms().expect(static_cast<uint32_t>(num(w[1])), num(w[2]), Completion::counter(c));
    if (!s.ok()) return "error " + s.to_string();
    if (!c.wait_for(1, std::chrono::milliseconds(num(w[3])))) {
      engine->imms().release(static_cast<uint32_t>(num(w[1])));
      return "timeout count=" + std::to_string(engine->imms().count(static_cast<uint32_t>(num(w[1]))));
    }
    return c.done == 1 ? "ok" : "failed";
  }
  if (cmd == "count" && w.size() == 2) return std::to_string(engine->imms().count(static_cast<uint32_t>(num(w[1]))));
  if (cmd == "hash" && w.size() == 3) {
    const uint64_t off = num(w[1]), len = num(w[2]);
    if (off > region.size() || len > region.size() - off) return "error range";
    return hash_hex(region.data() + off, len);
  }
  if (cmd == "fill" && w.size() == 2) {  // fill <seed>: the region holds pattern <seed> (common/pattern.h)
    tools::fill_pattern(region.data(), region.size(), num(w[1]));
    return "ok";
  }
  if (cmd == "zero") {
    std::memset(region.data(), 0, region.size());
    return "ok";
  }
  if (cmd == "recvs" && w.size() == 3) {
    Status s = engine->post_recvs(num(w[1]), num(w[2]), [this](std::span<const uint8_t> m) {
      std::lock_guard lock(mu);
      message_hashes.push_back(hash_hex(m.data(), m.size()) + ":" + std::to_string(m.size()));
      messages.fetch_add(1);
    });
    return s.ok() ? "ok" : "error " + s.to_string();
  }
  if (cmd == "messages" && w.size() == 3) {  // messages <n> <timeout_ms>
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(num(w[2]));
    while (messages.load() < num(w[1]) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::lock_guard lock(mu);
    std::string out = messages.load() >= num(w[1]) ? "ok" : "timeout";
    for (const auto& h : message_hashes) out += " " + h;
    return out;
  }
  if (cmd == "send" && w.size() == 5) {  // send <addr_hex> <count> <len> <seed>
    auto addr = DomainAddress::from_hex(w[1]);
    if (!addr.ok()) return "error " + addr.status().to_string();
    CompletionCounter c;
    const uint64_t count = num(w[2]), len = num(w[3]);
    for (uint64_t i = 0; i < count; ++i) {
      std::vector<uint8_t> m(len);
      tools::fill_pattern(m.data(), len, num(w[4]) + i);
      auto id = engine->submit_send(*addr, m, Completion::counter(c));
      if (!id.ok()) return "error " + id.status().to_string();
    }
    if (!c.wait_for(count, std::chrono::seconds(60))) return "timeout";
    return c.errors == 0 ? "ok" : "errors " + std::to_string(c.errors.load());
  }
  if (cmd == "write_burst" && w.size() == 5) {  // write_burst <desc_hex> <count> <chunk> <imm>
    auto desc = MrDesc::from_hex(w[1]);
    if (!desc.ok()) return "error " + desc.status().to_string();
    const uint64_t count = num(w[2]), chunk = num(w[3]);
    if (chunk == 0 || chunk > region.size() || chunk > desc->length()) return "error chunk";
    if (!source.handle.valid()) {
      auto reg = engine->register_memory(region.data(), region.size(), Access::kLocalOnly);
      if (!reg.ok()) return "error " + reg.status().to_string();
      source = *reg;
    }
    burst_calls = std::vector<std::atomic<int>>(count);
    burst_outcomes.clear();
    const uint64_t slots = std::min(region.size(), desc->length()) / chunk;
    for (uint64_t i = 0; i < count; ++i) {
      const uint64_t off = (i % slots) * chunk;
      auto id = engine->submit_write({source.handle, off, *desc, off, chunk, static_cast<uint32_t>(num(w[4]))},
                                     Completion::callback([this, i](const Status& st) {
                                       burst_calls[i].fetch_add(1);
                                       std::lock_guard lock(mu);
                                       burst_outcomes[std::string(error_code_name(st.code()))]++;
                                     }));
      if (!id.ok()) return "error " + id.status().to_string();
    }
    return "ok";
  }
  if (cmd == "burst_status") {  // "<finished> <exactly_once 0|1> code=n ..."
    size_t finished = 0;
    bool once = true;
    for (auto& c : burst_calls) {
      finished += c.load() > 0;
      once = once && c.load() <= 1;
    }
    std::lock_guard lock(mu);
    std::string out = std::to_string(finished) + " " + (once ? "1" : "0");
    for (const auto& [code, n] : burst_outcomes) out += " " + code + "=" + std::to_string(n);
    return out;
  }
  if (cmd == "stop") {
    Status s = engine->stop();
    return s.ok() ? "ok" : "error " + s.to_string();
  }
  return "error unknown command '" + cmd + "'";
}

}  // namespace

int run_agent(int argc, char** argv) {
  // argv: <fd> <provider> <interfaces or -> <domains> <reorder_seed> <region_bytes> <stall_timeout_ms>
  if (argc != 7) {
    std::fprintf(stderr, "agent: bad arguments\n");
    return 2;
  }
  tools::ControlChannel channel(std::atoi(argv[0]));
  ProviderConfig config{"agent", argv[1], std::string(argv[2]) == "-" ? "" : argv[2],
                        std::stoull(argv[3]), std::stoull(argv[4]), std::stoull(argv[6])};
  Agent agent;
  auto engine = config.builder().build();
  if (!engine.ok()) {
    channel.send("error " + engine.status().to_string());
    return 1;
  }
  agent.engine = std::move(engine).value();
  agent.region.assign(std::stoull(argv[5]), 0);
  auto reg = agent.engine->register_memory(agent.region.data(), agent.region.size(), Access::kRemoteWrite);
  if (!reg.ok()) {
    channel.send("error " + reg.status().to_string());
    return 1;
  }
  agent.reg = *reg;
  channel.send("hello " + agent.engine->main_address().to_hex() + " " + agent.reg.desc.to_hex());
  while (true) {
    auto line = channel.recv(std::chrono::minutes(10));
    if (!line || *line == "exit") break;
    auto words = tools::split_words(*line);
    channel.send(words.empty() ? "error empty" : agent.handle(words));
  }
  agent.engine->stop();
  return 0;
}

// --- test side --------------------------------------------------------------------------------

AgentProcess::AgentProcess(const ProviderConfig& config, size_t region_bytes) {
  auto [mine, theirs] = tools::make_channel_pair();
  const int child_fd = theirs.fd();
  std::vector<std::string> args = {"integration_tests", "--fabric-agent", std::to_string(child_fd), config.provider,
                                   config.interface_name.empty() ? "-" : config.interface_name,
                                   std::to_string(config.domains), std::to_string(config.reorder_seed),
                                   std::to_string(region_bytes), std::to_string(config.stall_timeout_ms)};
  pid_ = fork();
  if (pid_ == 0) {
    fcntl(child_fd, F_SETFD, 0);  // keep the channel across exec
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv("/proc/self/exe", argv.data());
    _exit(127);
  }
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

bool AgentProcess::expect_imms(uint32_t imm, uint64_t n, std::chrono::milliseconds timeout) {
  return call("expect " + std::to_string(imm) + " " + std::to_string(n) + " " + std::to_string(timeout.count()),
              timeout + std::chrono::seconds(10)) == "ok";
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

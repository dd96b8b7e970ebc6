#include "support/kv_agent.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <sstream>
#include <thread>

namespace fabric_lib::kv::testing {

std::string join(const std::vector<uint32_t>& v) {
  if (v.empty()) return "-";
  std::string s;
  for (uint32_t x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

std::vector<uint32_t> split_u32(const std::string& s) {
  std::vector<uint32_t> out;
  if (s == "-" || s.empty()) return out;
  std::istringstream in(s);
  std::string x;
  while (std::getline(in, x, ',')) out.push_back(static_cast<uint32_t>(std::stoul(x)));
  return out;
}

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::istringstream in(s);
  std::string x;
  while (std::getline(in, x, sep)) out.push_back(x);
  return out;
}

std::string code(const Status& s) { return std::string(error_code_name(s.code())); }

std::string prefill_command(PrefillHost& h, const std::vector<std::string>& w) {
  const std::string& c = w[0];
  Prefiller& p = h.prefiller();
  if (c == "add" && (w.size() == 7 || w.size() == 8))  // add <id> <tokens> <pages> <tail_off> <tail_len> <timeout_ms> [decode_tp]
    return code(h.add(w[1], std::stoul(w[2]), split_u32(w[3]), std::stoull(w[4]), std::stoull(w[5]),
                      std::chrono::milliseconds(std::stoull(w[6])), w.size() == 8 ? std::stoul(w[7]) : 0));
  if (c == "prefill" && w.size() == 3) return code(h.prefill(split(w[2], ','), std::stoul(w[1])));  // prefill <chunk> <ids>
  if (c == "pass" && w.size() == 2) {  // pass <id:end,...>
    std::vector<PassEntry> e;
    for (const std::string& x : split(w[1], ',')) {
      const size_t colon = x.find(':');
      e.push_back({x.substr(0, colon), static_cast<uint32_t>(std::stoul(x.substr(colon + 1)))});
    }
    auto id = p.begin_pass(e);
    return id.ok() ? std::to_string(*id) : code(id.status());
  }
  if (c == "progress" && w.size() == 3) return code(p.progress(std::stoull(w[1]), std::stoull(w[2])));
  if (c == "status" && w.size() == 2) {
    auto s = p.status(w[1]);
    if (!s.ok()) return code(s.status());
    return std::string(kv_poll_name(s->poll)) + " " + (s->pages_reusable ? "1" : "0") + " " + code(s->error);
  }
  if (c == "wait_finished" && w.size() == 3) {  // wait_finished <n> <timeout_ms>: "<count> id=code ..."
    static std::vector<FinishedRequest> seen;
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(std::stoull(w[2]));
    while (seen.size() < std::stoul(w[1]) && std::chrono::steady_clock::now() < until) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      for (auto& f : p.wait_finished(left)) seen.push_back(f);
    }
    std::string out = std::to_string(seen.size());
    for (const auto& f : seen) out += " " + f.id + "=" + code(f.status);
    return out;
  }
  if (c == "abort" && w.size() == 2) return code(p.abort(w[1], cancelled("aborted by the test")));
  if (c == "stats") {
    PrefillerStats s = p.stats();
    std::ostringstream o;
    o << "dispatches=" << s.dispatches_received << " rejected=" << s.dispatches_rejected << " paged=" << s.paged_writes_posted
      << " pages=" << s.pages_posted << " tails=" << s.tail_writes_posted << " completed=" << s.writes_completed
      << " failed=" << s.writes_failed << " cancelled=" << s.writes_cancelled << " cancels=" << s.cancels_received
      << " confirms=" << s.confirms_sent
      << " malformed=" << s.malformed_messages << " unexpected=" << s.unexpected_messages << " dead=" << s.peers_declared_dead
      << " active=" << s.active_requests << " wrs=" << h.engine().stats().wrs_posted
      << " m_started=" << kv_requests_metric(h.engine(), "prefiller", "started")
      << " m_ok=" << kv_requests_metric(h.engine(), "prefiller", "succeeded")
      << " m_failed=" << kv_requests_metric(h.engine(), "prefiller", "failed");
    return o.str();
  }
  return "error unknown command";
}

std::string decode_command(DecodeHost& h, const std::vector<std::string>& w) {
  const std::string& c = w[0];
  if (c == "start" && w.size() == 12) {
    // start <id> <tokens> <first_page> <pages> <src_pages> <tail_off> <tail_len> <timeout_ms> <prefill_tp> <packing> <addrs>
    DecodeHost::Started s;
    s.id = w[1];
    s.tokens = std::stoul(w[2]);
    s.first_page = std::stoul(w[3]);
    s.pages = split_u32(w[4]);
    s.src_pages = split_u32(w[5]);
    s.tail_offset = std::stoull(w[6]);
    s.tail_length = std::stoull(w[7]);
    PrefillInstance inst;
    inst.tp_size = std::stoul(w[9]);
    inst.packing = static_cast<KvPacking>(std::stoul(w[10]));
    for (const std::string& a : split(w[11], ',')) inst.ranks.push_back(*DomainAddress::from_hex(a));
    s.prefill_tp = inst.tp_size;
    return code(h.start(s, inst, std::chrono::milliseconds(std::stoull(w[8]))));
  }
  if (c == "wait" && w.size() == 3) {  // wait <timeout_ms> <ids>: "<n> id=code ..."
    auto ids = split(w[2], ',');
    auto r = h.wait(ids, std::chrono::milliseconds(std::stoull(w[1])));
    std::string out = std::to_string(r.size());
    for (const auto& [id, st] : r) out += " " + id + "=" + code(st);
    return out;
  }
  if (c == "verify" && w.size() == 2) return h.verify(w[1]);
  if (c == "cancel" && w.size() == 2) return code(h.decoder().cancel(w[1]));
  if (c == "status" && w.size() == 2) {
    auto s = h.decoder().status(w[1]);
    if (!s.ok()) return code(s.status());
    return std::string(kv_poll_name(s->poll)) + " " + (s->pages_reusable ? "1" : "0") + " " + code(s->error);
  }
  if (c == "stats") {
    DecoderStats s = h.decoder().stats();
    std::ostringstream o;
    o << "started=" << s.requests_started << " ok=" << s.requests_succeeded << " failed=" << s.requests_failed
      << " confirms=" << s.confirms_received << " rejects=" << s.rejects_received << " malformed=" << s.malformed_messages
      << " dead=" << s.peers_declared_dead << " active=" << s.active_requests;
    return o.str();
  }
  return "error unknown command";
}

}  // namespace

int run_kv_agent(int argc, char** argv) {
  if (argc != 3) return 2;
  tools::ControlChannel channel(std::atoi(argv[0]));
  const bool prefill = std::string(argv[1]) == "prefill";
  const HostConfig config = HostConfig::parse(argv[2]);
  std::unique_ptr<PrefillHost> ph;
  std::unique_ptr<DecodeHost> dh;
  Host* host = nullptr;
  if (prefill) host = (ph = std::make_unique<PrefillHost>(config)).get();
  else host = (dh = std::make_unique<DecodeHost>(config)).get();
  if (!host->ok()) {
    channel.send("error " + host->status().to_string());
    return 1;
  }
  channel.send("hello " + host->engine().main_address().to_hex());
  while (true) {
    auto line = channel.recv(std::chrono::minutes(5));
    if (!line || *line == "exit") break;
    auto words = tools::split_words(*line);
    if (words.empty()) {
      channel.send("error empty");
      continue;
    }
    if (words[0] == "hash" && words.size() == 3) {
      channel.send(host->hash(std::stoull(words[1]), std::stoull(words[2])));
      continue;
    }
    try {
      channel.send(prefill ? prefill_command(*ph, words) : decode_command(*dh, words));
    } catch (const std::exception& e) {
      channel.send(std::string("error ") + e.what());
    }
  }
  return 0;
}

KvAgent::KvAgent(AgentRole role, const HostConfig& config) {
  auto [mine, theirs] = tools::make_channel_pair();
  const int child_fd = theirs.fd();
  std::vector<std::string> args = {"kv_integration_tests", "--kv-agent", std::to_string(child_fd),
                                   role == AgentRole::kPrefill ? "prefill" : "decode", config.to_string()};
  pid_ = tools::spawn_self(args, child_fd);
  channel_ = std::move(mine);
  if (pid_ < 0) return;
  auto hello = channel_.recv(kTimeout);
  if (!hello) return;
  auto words = tools::split_words(*hello);
  if (words.size() != 2 || words[0] != "hello") {
    std::fprintf(stderr, "kv agent failed to start: %s\n", hello->c_str());
    return;
  }
  auto a = DomainAddress::from_hex(words[1]);
  if (a.ok()) address_ = *a;
}

KvAgent::~KvAgent() {
  if (pid_ <= 0) return;
  channel_.send("exit");
  for (int i = 0; i < 1000; ++i) {  // up to ~10 s
    if (waitpid(pid_, nullptr, WNOHANG) == pid_) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
}

void KvAgent::kill9() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

std::string KvAgent::call(const std::string& command, std::chrono::milliseconds timeout) {
  if (!channel_.send(command)) return "<no reply>";
  auto reply = channel_.recv(timeout);
  return reply ? *reply : "<no reply>";
}

}  // namespace fabric_lib::kv::testing

// moe_rank: one rank of an AllToAll in its own process, for the multi-process tests. It speaks a
// line protocol on stdin/stdout with the test that launched it:
//   -> "info <hex>"                 its RankInfo
//   <- "infos <hex0> ... <hexW-1>"  everyone's, by rank
//   -> "connected"
//   -> "step <t> ok <digest> <rows>" per step (digest: rows_digest of its combine output), or
//      "step <t> error <code> <message>" and exit 3
//   -> "paused <t>" (with pause=<t>: after step t's dispatch_send; then it waits to be killed)
//   -> "done" after every step and AllToAll::finish(); then it waits for "exit" and exits 0
// Options (key=value): rank world provider domains reorder steps seed tokens experts topk hidden
// scales dtype(fp8|bf16|fp32) out(bf16|fp32) private overflow padding timeout_ms vary pause.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <thread>

#include "fabric_lib/fabric_lib.h"
#include "fabric_lib/moe/all_to_all.h"
#include "support/rank_runner.h"

using namespace fabric_lib;
using namespace fabric_lib::moe;

namespace {

std::map<std::string, std::string> parse(int argc, char** argv) {
  std::map<std::string, std::string> m;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    const size_t eq = a.find('=');
    if (eq != std::string::npos) m[a.substr(0, eq)] = a.substr(eq + 1);
  }
  return m;
}

uint64_t num(const std::map<std::string, std::string>& m, const std::string& k, uint64_t dflt) {
  auto it = m.find(k);
  return it == m.end() ? dflt : std::strtoull(it->second.c_str(), nullptr, 0);
}

DType dtype(const std::string& s) {
  if (s == "fp8") return DType::kFp8E4M3;
  if (s == "fp32") return DType::kFp32;
  return DType::kBf16;
}

void say(const std::string& line) {
  std::cout << line << std::endl;  // flushes: the test reads line by line
}

}  // namespace

int main(int argc, char** argv) {
  const auto a = parse(argc, argv);
  MoeConfig c;
  c.rank = static_cast<uint32_t>(num(a, "rank", 0));
  c.world_size = static_cast<uint32_t>(num(a, "world", 1));
  c.max_num_tokens = static_cast<uint32_t>(num(a, "tokens", 8));
  c.num_experts = static_cast<uint32_t>(num(a, "experts", 16));
  c.experts_per_token = static_cast<uint32_t>(num(a, "topk", 2));
  c.hidden_dim = static_cast<uint32_t>(num(a, "hidden", 64));
  c.hidden_dim_scale = static_cast<uint32_t>(num(a, "scales", 0));
  c.in_dtype = dtype(a.count("dtype") ? a.at("dtype") : "bf16");
  c.out_dtype = dtype(a.count("out") ? a.at("out") : "bf16");
  c.max_private_tokens = static_cast<uint32_t>(num(a, "private", kAuto));
  c.overflow_tokens = static_cast<uint32_t>(num(a, "overflow", kAuto));
  c.expert_padding = static_cast<uint32_t>(num(a, "padding", 1));
  c.step_timeout = std::chrono::milliseconds(num(a, "timeout_ms", 10000));
  const std::string provider = a.count("provider") ? a.at("provider") : "tcp";

  TransferEngineBuilder b;
  b.provider(provider)
      .domains_per_group(num(a, "domains", 1))
      .simulate_unordered_network(num(a, "reorder", 0))
      .stall_timeout(std::chrono::seconds(4));
  Result<std::unique_ptr<TransferEngine>> engine = b.build();
  if (!engine.ok()) {
    say("error engine " + engine.status().to_string());
    return 2;
  }
  Result<std::unique_ptr<AllToAll>> a2a = AllToAll::create(c, **engine);
  if (!a2a.ok()) {
    say("error create " + a2a.status().to_string());
    return 2;
  }
  say("info " + to_hex((*a2a)->local_info()));

  std::string line;
  if (!std::getline(std::cin, line) || line.rfind("infos ", 0) != 0) {
    say("error no infos");
    return 2;
  }
  std::istringstream in(line.substr(6));
  std::vector<std::vector<uint8_t>> infos;
  for (std::string hex; in >> hex;) {
    Result<std::vector<uint8_t>> bytes = from_hex(hex);
    if (!bytes.ok()) {
      say("error bad hex");
      return 2;
    }
    infos.push_back(std::move(bytes).value());
  }
  Status s = (*a2a)->connect(infos);
  if (!s.ok()) {
    say("error connect " + s.to_string());
    return 2;
  }
  say("connected");

  testing::RunOptions o;
  o.seed = num(a, "seed", 1);
  o.steps = static_cast<uint32_t>(num(a, "steps", 4));
  o.vary_tokens = num(a, "vary", 1) != 0;
  const uint64_t pause = num(a, "pause", 0);
  o.after_dispatch_send = [pause](uint64_t step) {
    if (step != pause) return;
    say("paused " + std::to_string(step));
    while (true) ::pause();  // the test kills us
  };
  s = testing::run_rank(**a2a, o, [](const testing::StepReport& r) {
    if (r.status.ok()) {
      say("step " + std::to_string(r.step) + " ok " + std::to_string(r.combine_digest) + " " + std::to_string(r.recv_rows));
    } else {
      say("step " + std::to_string(r.step) + " error " + std::string(error_code_name(r.status.code())) + " " +
          r.status.message());
    }
  });
  if (s.ok()) {
    s = (*a2a)->finish(c.step_timeout);
    if (!s.ok()) say("error finish " + s.to_string());
  }
  if (s.ok()) {
    say("done");
    // Every rank has finished; the test tells us when all have (then nobody still waits for us).
    while (std::getline(std::cin, line) && line != "exit") {
    }
  }
  // An orderly teardown in both cases: after a failure it must not hang either (the test bounds it).
  a2a.value().reset();
  (*engine)->stop();
  return s.ok() ? 0 : 3;
}

#include "support/agent.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "common/control_channel.h"
#include "common/imm_wait.h"
#include "common/pattern.h"
#include "support/bounds.h"
#include "support/peer_agent.h"

namespace fabric_lib::testing {

uint64_t parse_u64(const std::string& text) { return std::stoull(text); }

namespace {
std::string error_reply(const Status& s) { return "error " + s.to_string(); }
}  // namespace

Agent::Agent(std::unique_ptr<TransferEngine> engine, std::unique_ptr<tools::Region> region, MrRegistration reg,
             std::vector<Command> extra_commands)
    : engine_(std::move(engine)), region_(std::move(region)), reg_(std::move(reg)) {
  using W = const Words&;
  commands_ = {
      {"expect", 4, [](Agent& a, W w) { return a.expect(w); }},
      {"count", 2, [](Agent& a, W w) { return std::to_string(a.engine_->imms().count(static_cast<uint32_t>(parse_u64(w[1])))); }},
      {"quiet", 4, [](Agent& a, W w) { return a.quiet(w); }},
      {"stats", 1,
       [](Agent& a, W) {
         const EngineStats s = a.engine_->stats();
         return std::to_string(s.wrs_posted) + " " + std::to_string(s.unordered_windows_shuffled) + " " +
                std::to_string(s.unordered_events_held) + " " + std::to_string(s.imms_received);
       }},
      {"hash", 3,
       [](Agent& a, W w) {
         Result<std::string> h = a.region_->hash(parse_u64(w[1]), parse_u64(w[2]));
         return h.ok() ? *h : error_reply(h.status());
       }},
      {"fill", 2,
       [](Agent& a, W w) {
         Status s = a.region_->fill(parse_u64(w[1]));
         return s.ok() ? std::string("ok") : error_reply(s);
       }},
      {"zero", 1,
       [](Agent& a, W) {
         Status s = a.region_->zero();
         return s.ok() ? std::string("ok") : error_reply(s);
       }},
      {"recvs", 3, [](Agent& a, W w) { return a.recvs(w); }},
      {"messages", 3, [](Agent& a, W w) { return a.messages(w); }},
      {"send", 5, [](Agent& a, W w) { return a.send(w); }},
      {"write_burst", 5, [](Agent& a, W w) { return a.write_burst(w); }},
      {"burst_status", 1, [](Agent& a, W) { return a.burst_status(); }},
      {"metrics_endpoint", 1,
       [](Agent& a, W) {
         const std::string e = a.engine_->metrics_endpoint();
         return e.empty() ? std::string("none") : e;
       }},
      {"stop", 1,
       [](Agent& a, W) {
         Status s = a.engine_->stop();
         return s.ok() ? std::string("ok") : error_reply(s);
       }},
  };
  for (Command& c : form_commands()) commands_.push_back(std::move(c));
  for (Command& c : extra_commands) commands_.push_back(std::move(c));
}

Agent::~Agent() {
  if (engine_) engine_->stop();
}

std::string Agent::handle(const Words& w) {
  if (w.empty()) return "error empty";
  for (const Command& c : commands_) {
    if (c.name != w[0]) continue;
    if (c.words != w.size()) return "error '" + w[0] + "' takes " + std::to_string(c.words - 1) + " arguments";
    try {
      return c.run(*this, w);
    } catch (const std::exception& e) {  // a malformed number from the test
      return std::string("error ") + e.what();
    }
  }
  return "error unknown command '" + w[0] + "'";
}

std::string Agent::expect(const Words& w) {
  const uint32_t imm = static_cast<uint32_t>(parse_u64(w[1]));
  Status s = tools::wait_for_imms(engine_->imms(), imm, parse_u64(w[2]), std::chrono::milliseconds(parse_u64(w[3])),
                                  /*exact=*/false);
  if (s.ok()) return "ok";
  if (s.code() == ErrorCode::kDeadlineExceeded) return "timeout count=" + std::to_string(engine_->imms().count(imm));
  if (s.code() == ErrorCode::kInternal) return "failed";
  return error_reply(s);
}

std::string Agent::quiet(const Words& w) {
  const uint32_t imm = static_cast<uint32_t>(parse_u64(w[1]));
  const uint64_t want = parse_u64(w[2]);
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(parse_u64(w[3]));
  do {  // a bounded check of the table's state: the count must not move
    const uint64_t c = engine_->imms().count(imm);
    if (c != want) return "changed count=" + std::to_string(c);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  } while (std::chrono::steady_clock::now() < end);
  return "ok";
}

std::string Agent::recvs(const Words& w) {
  Status s = engine_->post_recvs(parse_u64(w[1]), parse_u64(w[2]), [this](std::span<const uint8_t> m) {
    std::lock_guard lock(mu_);
    message_hashes_.push_back(tools::fnv1a_hex(m.data(), m.size()) + ":" + std::to_string(m.size()));
    messages_.fetch_add(1);
  });
  return s.ok() ? "ok" : error_reply(s);
}

std::string Agent::messages(const Words& w) {
  const uint64_t want = parse_u64(w[1]);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(parse_u64(w[2]));
  while (messages_.load() < want && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::lock_guard lock(mu_);
  std::string out = messages_.load() >= want ? "ok" : "timeout";
  for (const auto& h : message_hashes_) out += " " + h;
  return out;
}

std::string Agent::send(const Words& w) {
  auto addr = DomainAddress::from_hex(w[1]);
  if (!addr.ok()) return error_reply(addr.status());
  const uint64_t count = parse_u64(w[2]), len = parse_u64(w[3]);
  // Per message: how often its completion came, and how it ended (a shared counter would miss
  // one duplicate plus one missing completion).
  auto calls = std::make_shared<std::vector<std::atomic<int>>>(count);
  auto errors = std::make_shared<std::atomic<uint64_t>>(0);
  for (uint64_t i = 0; i < count; ++i) {
    std::vector<uint8_t> m(len);
    tools::fill_pattern(m.data(), len, parse_u64(w[4]) + i);
    auto id = engine_->submit_send(*addr, m, Completion::callback([calls, errors, i](const Status& s) {
      (*calls)[i].fetch_add(1);
      if (!s.ok()) errors->fetch_add(1);
    }));
    if (!id.ok()) return error_reply(id.status());
  }
  auto finished = [&] {
    uint64_t n = 0;
    for (auto& c : *calls) n += c.load() > 0;
    return n;
  };
  const auto deadline = std::chrono::steady_clock::now() + bounds::kRequests;
  while (finished() < count && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (finished() < count) return "timeout " + std::to_string(finished()) + " of " + std::to_string(count);
  std::this_thread::sleep_for(bounds::kQuiet);  // nothing more may come
  for (uint64_t i = 0; i < count; ++i) {
    if ((*calls)[i].load() != 1) return "message " + std::to_string(i) + " completed " + std::to_string((*calls)[i].load()) + " times";
  }
  return errors->load() == 0 ? "ok" : "errors " + std::to_string(errors->load());
}

std::string Agent::write_burst(const Words& w) {  // from this agent's region into the descriptor's
  auto desc = MrDesc::from_hex(w[1]);
  if (!desc.ok()) return error_reply(desc.status());
  const uint64_t count = parse_u64(w[2]), chunk = parse_u64(w[3]);
  if (chunk == 0 || chunk > region_->size() || chunk > desc->length()) return "error chunk";
  if (!source_.handle.valid()) {
    auto reg = engine_->register_memory(region_->data(), region_->size(), Access::kLocalOnly, region_->kind());
    if (!reg.ok()) return error_reply(reg.status());
    source_ = *reg;
  }
  burst_calls_ = std::vector<std::atomic<int>>(count);
  burst_outcomes_.clear();
  const uint64_t slots = std::min<uint64_t>(region_->size(), desc->length()) / chunk;
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t off = (i % slots) * chunk;
    auto id = engine_->submit_write({source_.handle, off, *desc, off, chunk, static_cast<uint32_t>(parse_u64(w[4]))},
                                    Completion::callback([this, i](const Status& st) {
                                      burst_calls_[i].fetch_add(1);
                                      std::lock_guard lock(mu_);
                                      burst_outcomes_[std::string(error_code_name(st.code()))]++;
                                    }));
    if (!id.ok()) return error_reply(id.status());
  }
  return "ok";
}

std::string Agent::burst_status() {
  size_t finished = 0;
  bool once = true;
  for (auto& c : burst_calls_) {
    finished += c.load() > 0;
    once = once && c.load() <= 1;
  }
  std::lock_guard lock(mu_);
  std::string out = std::to_string(finished) + " " + (once ? "1" : "0");
  for (const auto& [code, n] : burst_outcomes_) out += " " + code + "=" + std::to_string(n);
  return out;
}

int run_agent(int argc, char** argv, const AgentSetup& setup) {
  // argv: <fd> <provider> <interfaces or -> <domains> <reorder_seed> <region_bytes> <stall_timeout_ms>
  if (argc != 7) {
    std::fprintf(stderr, "agent: bad arguments\n");
    return 2;
  }
  tools::ControlChannel channel(std::atoi(argv[0]));
  ProviderConfig config{"agent", argv[1], std::string(argv[2]) == "-" ? "" : argv[2],
                        std::stoull(argv[3]), std::stoull(argv[4]), std::stoull(argv[6])};
  Result<std::unique_ptr<tools::Region>> region = setup.make_region(std::stoull(argv[5]));
  if (!region.ok()) {
    channel.send(error_reply(region.status()));
    return 1;
  }
  auto engine = config.builder().build();
  if (!engine.ok()) {
    channel.send(error_reply(engine.status()));
    return 1;
  }
  auto reg = (*engine)->register_memory((*region)->data(), (*region)->size(), Access::kRemoteWrite, (*region)->kind());
  if (!reg.ok()) {
    channel.send(error_reply(reg.status()));
    return 1;
  }
  const std::string hello = "hello " + (*engine)->main_address().to_hex() + " " + reg->desc.to_hex();
  Agent agent(std::move(engine).value(), std::move(region).value(), *reg, setup.extra_commands);
  channel.send(hello);
  while (true) {
    auto line = channel.recv(std::chrono::minutes(10));
    if (!line || *line == "exit") break;
    channel.send(agent.handle(tools::split_words(*line)));
  }
  agent.engine().stop();
  if (setup.before_exit) setup.before_exit();
  return 0;
}

}  // namespace fabric_lib::testing

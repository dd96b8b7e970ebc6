// The agent's commands for the engine's request forms (agent.h): repeating imm expectations and
// what their sinks saw, waiting for a plain count, receives into the agent's own region, and
// zero-copy sends from it.
#include <chrono>
#include <thread>

#include "common/control_channel.h"
#include "common/pattern.h"
#include "support/agent.h"

namespace fabric_lib::testing {

namespace {
std::string error_text(const Status& s) { return "error " + s.to_string(); }
constexpr uint64_t kFlagEnded = UINT64_MAX;

// Polls `done` until it holds or `timeout` passes (the agent answers one command at a time, so
// a bounded poll here is the wait on the event).
template <typename Pred>
bool poll_until(Pred done, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return done();
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}
}  // namespace

// What one repeating expectation's sink has seen.
struct Agent::EveryState {
  std::string kind;  // counter, callback, flag
  CompletionCounter counter;
  alignas(8) uint64_t word = 0;
  std::atomic<uint64_t> last_round{0};  // callback: the latest round reported Ok
  std::atomic<bool> in_order{true};     // callback: rounds came 1, 2, 3, ... and the end named the last
  std::atomic<uint64_t> ends{0};
  std::mutex mu;
  std::string end_code = "-";

  uint64_t rounds() const {
    if (kind == "counter") return counter.done.load();
    if (kind == "flag") {
      const uint64_t w = __atomic_load_n(&word, __ATOMIC_ACQUIRE);
      return w == kFlagEnded ? 0 : w;  // a flag holds the latest round until the end replaces it
    }
    return last_round.load();
  }
  uint64_t ended() const {
    if (kind == "counter") return counter.errors.load();
    if (kind == "flag") return __atomic_load_n(&word, __ATOMIC_ACQUIRE) == kFlagEnded ? 1 : 0;
    return ends.load();
  }
};

std::vector<Agent::Command> Agent::form_commands() {
  using W = const Words&;
  return {
      {"every", 4, [](Agent& a, W w) { return a.every(w); }},
      {"every_status", 2, [](Agent& a, W w) { return a.every_status(w); }},
      {"wait_rounds", 4, [](Agent& a, W w) { return a.wait_rounds(w); }},
      {"wait_count", 4, [](Agent& a, W w) { return a.wait_count(w); }},
      {"release", 2,
       [](Agent& a, W w) {
         Status s = a.engine_->imms().release(static_cast<uint32_t>(parse_u64(w[1])));
         return s.ok() ? std::string("ok") : error_text(s);
       }},
      {"recvs_into", 4, [](Agent& a, W w) { return a.recvs_into(w); }},
      {"placement", 1, [](Agent& a, W) { return std::to_string(a.misplaced_.load()); }},
      {"send_from", 6, [](Agent& a, W w) { return a.send_from(w); }},
  };
}

std::shared_ptr<Agent::EveryState> Agent::every_state(uint32_t imm) {
  std::lock_guard lock(mu_);
  auto it = every_.find(imm);
  return it == every_.end() ? nullptr : it->second;
}

std::string Agent::every(const Words& w) {
  const uint32_t imm = static_cast<uint32_t>(parse_u64(w[1]));
  auto state = std::make_shared<EveryState>();
  state->kind = w[3];
  RepeatingSink sink;
  if (state->kind == "counter") {
    sink = RepeatingSink::counter(state->counter);
  } else if (state->kind == "flag") {
    sink = RepeatingSink::flag(&state->word, kFlagEnded);
  } else if (state->kind == "callback") {
    sink = RepeatingSink::callback([state](uint64_t round, const Status& s) {
      if (s.ok()) {
        if (round != state->last_round.load() + 1) state->in_order = false;
        state->last_round = round;
        return;
      }
      if (round != state->last_round.load()) state->in_order = false;  // the end names the rounds fired
      std::lock_guard lock(state->mu);
      state->end_code = error_code_name(s.code());
      state->ends.fetch_add(1);
    });
  } else {
    return "error sink must be counter, callback or flag";
  }
  // The sink holds `state` itself; the map keeps it (for every_status) until the agent exits.
  Status s = engine_->imms().expect_every(imm, parse_u64(w[2]), std::move(sink));
  if (!s.ok()) return error_text(s);
  std::lock_guard lock(mu_);
  every_[imm] = state;
  return "ok";
}

std::string Agent::every_status(const Words& w) {
  const uint32_t imm = static_cast<uint32_t>(parse_u64(w[1]));
  std::shared_ptr<EveryState> state = every_state(imm);
  if (!state) return "error no repeating expectation was registered for " + w[1];
  std::string code;
  {
    std::lock_guard lock(state->mu);
    code = state->end_code;
  }
  return std::to_string(engine_->imms().rounds(imm)) + " " + std::to_string(engine_->imms().count(imm)) + " " +
         std::to_string(state->rounds()) + " " + std::to_string(state->ended()) + " " +
         (state->in_order.load() ? "1" : "0") + " " + code;
}

std::string Agent::wait_rounds(const Words& w) {
  std::shared_ptr<EveryState> state = every_state(static_cast<uint32_t>(parse_u64(w[1])));
  if (!state) return "error no repeating expectation was registered for " + w[1];
  const uint64_t want = parse_u64(w[2]);
  if (poll_until([&] { return state->rounds() >= want; }, std::chrono::milliseconds(parse_u64(w[3])))) return "ok";
  return "timeout " + std::to_string(state->rounds());
}

std::string Agent::wait_count(const Words& w) {
  const uint32_t imm = static_cast<uint32_t>(parse_u64(w[1]));
  const uint64_t want = parse_u64(w[2]);
  const bool ok = poll_until([&] { return engine_->imms().count(imm) >= want; }, std::chrono::milliseconds(parse_u64(w[3])));
  return (ok ? "ok " : "timeout ") + std::to_string(engine_->imms().count(imm));
}

std::string Agent::recvs_into(const Words& w) {
  const uint64_t offset = parse_u64(w[1]), slot = parse_u64(w[2]), count = parse_u64(w[3]);
  const uint8_t* base = region_->data() + offset;
  Status s = engine_->post_recvs_into(
      reg_.handle, offset, slot, count, [this, base, slot, count](std::span<const uint8_t> m) {
        const uint8_t* p = m.data();
        const bool inside = p >= base && p + m.size() <= base + slot * count &&
                            static_cast<uint64_t>(p - base) % slot == 0 && m.size() <= slot;
        if (!inside) misplaced_.fetch_add(1);
        std::lock_guard lock(mu_);
        message_hashes_.push_back(tools::fnv1a_hex(p, m.size()) + ":" + std::to_string(m.size()));
        messages_.fetch_add(1);
      });
  return s.ok() ? "ok" : error_text(s);
}

std::string Agent::send_from(const Words& w) {
  auto addr = DomainAddress::from_hex(w[1]);
  if (!addr.ok()) return error_text(addr.status());
  const uint64_t count = parse_u64(w[2]), len = parse_u64(w[3]), seed = parse_u64(w[4]), offset = parse_u64(w[5]);
  if (region_->kind() != MemoryKind::kHost) return "error send_from needs a host region";
  std::vector<uint8_t> bytes(len);
  for (uint64_t i = 0; i < count; ++i) {
    // The source is rewritten only once the previous send from it completed.
    tools::fill_pattern(bytes.data(), len, seed + i);
    Status written = region_->write(offset, bytes.data(), len);
    if (!written.ok()) return error_text(written);
    CompletionCounter c;
    auto id = engine_->submit_send(*addr, reg_.handle, offset, len, Completion::counter(c));
    if (!id.ok()) return error_text(id.status());
    if (!c.wait_for(1, std::chrono::seconds(60))) return "timeout";
    if (c.errors.load() != 0) return "errors at message " + std::to_string(i);
  }
  return "ok";
}

}  // namespace fabric_lib::testing

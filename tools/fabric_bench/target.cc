#include "fabric_bench/target.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "common/imm_wait.h"
#include "fabric_bench/bench_engine.h"
#include "fabric_bench/raw_fabric.h"
#include "fabric_bench/verify.h"
#include "fabric_lib/fabric_lib.h"

namespace fabric_lib::bench {
namespace {

constexpr auto kWaitTimeout = std::chrono::seconds(60);
constexpr auto kIdleTimeout = std::chrono::hours(1);

std::string error_reply(const Status& s) { return "error " + s.to_string(); }

bool parse_u64(const std::string& text, uint64_t* out) {
  try {
    size_t used = 0;
    *out = std::stoull(text, &used, 0);
    return used == text.size();
  } catch (...) {
    return false;
  }
}

// One engine with one registered, zeroed region.
struct EngineWithRegion {
  AlignedBuffer region;
  std::unique_ptr<TransferEngine> engine;
  MrRegistration mr;

  ~EngineWithRegion() {
    if (engine) engine->stop();  // before the region goes
  }
};

// Waits until `engine` counted `n` imms of `imm`, consumes them, and insists nothing more came.
Status wait_imms(TransferEngine& engine, uint32_t imm, uint64_t n) {
  return tools::wait_for_imms(engine.imms(), imm, n, kWaitTimeout, /*exact=*/true);
}

Status compare_hash(const AlignedBuffer& region, uint64_t bytes, const std::string& expected) {
  if (expected == "-") return ok_status();
  uint64_t want = 0;
  if (!parse_u64(expected, &want)) return malformed("bad hash " + expected);
  if (bytes > region.size()) return out_of_range("check beyond the region");
  const uint64_t got = hash_region(region.data(), bytes);
  if (got != want) {
    return internal_error("bytes differ from the initiator's image (" + std::to_string(bytes) + " bytes checked)");
  }
  return ok_status();
}

class Target {
 public:
  explicit Target(std::string interface_override) : interface_override_(std::move(interface_override)) {}
  ~Target() { teardown(); }

  // Returns the reply; sets *done on "bye".
  std::string handle(const std::vector<std::string>& w, bool* done);

 private:
  void teardown();
  Status setup(const std::vector<std::string>& w);
  std::string region(uint64_t bytes);
  Status raw_start();
  Status raw_stop();
  Status raw_wait(uint32_t imm, uint64_t n);
  // The raw poller answers every `ping` imm with a `pong` imm to the initiator's raw region.
  Status raw_echo(uint32_t ping, uint32_t pong, const std::string& region);
  Status raw_echo_end(uint64_t n);
  std::string peers(size_t count, uint64_t bytes);
  Status echo(uint32_t ping, uint32_t pong, const std::string& desc_hex, bool on_caller);
  Status echo_end(uint32_t ping, uint64_t n);

  std::string interface_override_;
  EngineConfig config_;
  std::unique_ptr<EngineWithRegion> main_;
  std::unique_ptr<RawFabric> raw_;
  RawImmCounts raw_counts_{};
  std::thread raw_poller_;
  std::atomic<bool> raw_polling_{false};
  std::atomic<bool> raw_echoing_{false};
  uint32_t raw_ping_ = 0, raw_pong_ = 0;
  std::atomic<uint64_t> raw_echoed_{0};
  std::mutex raw_error_mu_;
  Status raw_error_;
  std::vector<std::unique_ptr<EngineWithRegion>> peers_;
  uint64_t peer_bytes_ = 0;
  // echo: the rounds of the ping's repeating expectation, and the thread answering them.
  void echo_stop();
  CompletionCounter echo_rounds_;
  uint64_t echo_answered_ = 0;  // echo thread only
  uint32_t echo_ping_ = 0;
  std::atomic<bool> echo_running_{false};
  std::thread echo_thread_;
};

void Target::teardown() {
  echo_stop();
  raw_stop();
  peers_.clear();
  main_.reset();
  raw_.reset();
}

Status Target::setup(const std::vector<std::string>& w) {
  if (w.size() != 6) return invalid_argument("setup wants 5 arguments");
  Result<EngineConfig> config = decode_engine_config(w[1], w[2], w[3], w[4], w[5]);
  if (!config.ok()) return config.status();
  teardown();
  config_ = *config;
  // The initiator chooses the target's idle policy (--target-spin): adaptive by default, so an idle
  // target engine leaves the CPU to the raw runs.
  if (!interface_override_.empty()) config_.interface_name = interface_override_;
  main_ = std::make_unique<EngineWithRegion>();
  Result<std::unique_ptr<TransferEngine>> engine = build_bench_engine(config_, false);
  if (!engine.ok()) return engine.status();
  main_->engine = std::move(engine).value();
  Result<std::unique_ptr<RawFabric>> raw = RawFabric::open(config_.provider, config_.interface_name, config_.domains);
  if (!raw.ok()) return raw.status();
  raw_ = std::move(raw).value();
  return ok_status();
}

std::string Target::region(uint64_t bytes) {
  if (!main_ || !raw_) return error_reply(Status(ErrorCode::kFailedPrecondition, "no setup yet"));
  if (main_->mr.handle.valid()) main_->engine->unregister_memory(main_->mr.handle);
  main_->mr = {};
  main_->region = AlignedBuffer(bytes);
  if (!main_->region.ok()) return error_reply(resource_exhausted("cannot allocate " + std::to_string(bytes) + " bytes"));
  Result<MrRegistration> mr = main_->engine->register_memory(main_->region.data(), bytes, Access::kRemoteWrite);
  if (!mr.ok()) return error_reply(mr.status());
  main_->mr = *mr;
  Result<RawRemoteRegion> raw = raw_->register_region(main_->region.data(), bytes, true);
  if (!raw.ok()) return error_reply(raw.status());
  return "ok " + mr->desc.to_hex() + " " + encode_raw_region(*raw);
}

Status Target::raw_start() {
  if (!raw_) return Status(ErrorCode::kFailedPrecondition, "no setup yet");
  raw_stop();
  for (auto& c : raw_counts_) c.store(0);
  {
    std::lock_guard lock(raw_error_mu_);
    raw_error_ = ok_status();
  }
  raw_polling_.store(true);
  // Busy-polls like a worker under load: this is the provider's ceiling, so it gets a full core.
  raw_poller_ = std::thread([this] {
    uint32_t idle = 0;
    while (raw_polling_.load(std::memory_order_relaxed)) {
      Result<size_t> n = raw_->poll_target(raw_counts_);
      Status echo;
      if (n.ok() && raw_echoing_.load(std::memory_order_acquire)) {  // raw_echo: answer new pings
        while (echo.ok() && raw_echoed_.load(std::memory_order_relaxed) < raw_counts_[raw_ping_ & 0xff].load()) {
          echo = raw_->post_imm(raw_pong_);
          if (echo.ok()) raw_echoed_.fetch_add(1);
        }
      }
      if (!n.ok() || !echo.ok()) {
        std::lock_guard lock(raw_error_mu_);
        raw_error_ = n.ok() ? echo : n.status();
        return;
      }
      // As the raw initiator: after a long idle stretch, share a crowded core once.
      idle = *n ? 0 : idle + 1;
      if (idle >= 256) {
        sched_yield();
        idle = 0;
      }
    }
  });
  return ok_status();
}

Status Target::raw_stop() {
  raw_polling_.store(false);
  if (raw_poller_.joinable()) raw_poller_.join();
  std::lock_guard lock(raw_error_mu_);
  return raw_error_;
}

Status Target::raw_wait(uint32_t imm, uint64_t n) {
  std::atomic<uint64_t>& count = raw_counts_[imm & 0xff];
  const auto deadline = std::chrono::steady_clock::now() + kWaitTimeout;
  while (count.load() < n) {
    {
      std::lock_guard lock(raw_error_mu_);
      if (!raw_error_.ok()) return raw_error_;
    }
    if (!raw_polling_.load()) return Status(ErrorCode::kFailedPrecondition, "raw poller not running");
    if (std::chrono::steady_clock::now() > deadline) {
      return Status(ErrorCode::kDeadlineExceeded, "raw imm " + std::to_string(imm) + ": " +
                                                      std::to_string(count.load()) + " of " + std::to_string(n));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  const uint64_t got = count.exchange(0);
  if (got != n) return internal_error("raw imm " + std::to_string(imm) + ": " + std::to_string(got) + " arrived, " + std::to_string(n) + " expected");
  return ok_status();
}

Status Target::raw_echo(uint32_t ping, uint32_t pong, const std::string& region) {
  if (!raw_) return Status(ErrorCode::kFailedPrecondition, "no setup yet");
  Result<RawRemoteRegion> initiator = decode_raw_region(region);
  if (!initiator.ok()) return initiator.status();
  FABRIC_LIB_RETURN_IF_ERROR(raw_stop());  // the poller owns the endpoints while it runs
  FABRIC_LIB_RETURN_IF_ERROR(raw_->connect(*initiator));
  raw_ping_ = ping;
  raw_pong_ = pong;
  raw_echoed_.store(0);
  raw_echoing_.store(true, std::memory_order_release);
  return raw_start();
}

Status Target::raw_echo_end(uint64_t n) {
  raw_echoing_.store(false, std::memory_order_release);
  Status s = raw_stop();
  const uint64_t echoed = raw_echoed_.load();
  if (s.ok() && echoed != n) s = internal_error(std::to_string(echoed) + " raw pings answered, not " + std::to_string(n));
  return s;
}

std::string Target::peers(size_t count, uint64_t bytes) {
  if (!main_) return error_reply(Status(ErrorCode::kFailedPrecondition, "no setup yet"));
  if (count == 0 || count > 256) return error_reply(invalid_argument("peers: count must be 1..256"));
  if (bytes != peer_bytes_) peers_.clear();
  peer_bytes_ = bytes;
  // Scatter peers stay adaptive whatever --target-spin says: 64 busy-polling engines would take
  // 64 cores.
  EngineConfig peer_config = config_;
  peer_config.spin = false;
  // Building an engine costs tenths of a second (mostly fi_getinfo), so the peers are built
  // several at a time: 64 of them one by one would take most of a sweep.
  const size_t parallel = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 16);
  while (peers_.size() < count) {
    const size_t batch = std::min(parallel, count - peers_.size());
    std::vector<std::unique_ptr<EngineWithRegion>> built(batch);
    std::vector<Status> failures(batch);
    std::vector<std::thread> builders;
    for (size_t k = 0; k < batch; ++k) {
      builders.emplace_back([&, k] {
        auto p = std::make_unique<EngineWithRegion>();
        p->region = AlignedBuffer(bytes);
        Result<std::unique_ptr<TransferEngine>> engine = build_bench_engine(peer_config, false);
        if (!engine.ok()) {
          failures[k] = engine.status();
          return;
        }
        p->engine = std::move(engine).value();
        Result<MrRegistration> mr = p->engine->register_memory(p->region.data(), bytes, Access::kRemoteWrite);
        if (!mr.ok()) {
          failures[k] = mr.status();
          return;
        }
        p->mr = *mr;
        built[k] = std::move(p);
      });
    }
    for (std::thread& t : builders) t.join();
    for (size_t k = 0; k < batch; ++k) {
      if (!failures[k].ok()) return error_reply(failures[k]);
      peers_.push_back(std::move(built[k]));
    }
  }
  std::string reply = "ok";
  for (size_t i = 0; i < count; ++i) reply += " " + peers_[i]->mr.desc.to_hex();
  return reply;
}

Status Target::echo(uint32_t ping, uint32_t pong, const std::string& desc_hex, bool on_caller) {
  if (!main_) return Status(ErrorCode::kFailedPrecondition, "no setup yet");
  Result<MrDesc> desc = MrDesc::from_hex(desc_hex);
  if (!desc.ok()) return desc.status();
  TransferEngine* engine = main_->engine.get();
  echo_stop();
  // The way a latency-bound application reacts: a repeating expectation bumps a counter on the
  // thread that counted the imm (no hop to the callback thread), and a spinning thread answers
  // each round with a pong, posted on that thread (as the raw poller's echo does). `on_caller`:
  // that thread also calls progress() while it waits, so it counts the pings itself.
  FABRIC_LIB_RETURN_IF_ERROR(engine->imms().expect_every(ping, 1, RepeatingSink::counter(echo_rounds_)));
  echo_ping_ = ping;
  echo_answered_ = 0;
  echo_running_.store(true);
  echo_thread_ = std::thread([this, engine, pong, on_caller, dst = *desc] {
    uint32_t idle = 0;
    while (echo_running_.load(std::memory_order_relaxed)) {
      if (echo_rounds_.done.load(std::memory_order_acquire) == echo_answered_) {
        if (on_caller && engine->progress() > 0) continue;
        if (++idle >= 256) {  // as the raw poller: after a long idle stretch, share a crowded core once
          sched_yield();
          idle = 0;
        }
        continue;
      }
      idle = 0;
      ++echo_answered_;
      (void)engine->submit_imm(pong, dst, Completion());
    }
  });
  return ok_status();
}

void Target::echo_stop() {
  echo_running_.store(false);
  if (echo_thread_.joinable()) echo_thread_.join();
  if (main_ && echo_ping_ != 0) main_->engine->imms().release(echo_ping_);
  echo_rounds_.done.store(0);
  echo_rounds_.errors.store(0);
  echo_ping_ = 0;
}

Status Target::echo_end(uint32_t ping, uint64_t n) {
  if (!main_) return Status(ErrorCode::kFailedPrecondition, "no setup yet");
  const auto deadline = std::chrono::steady_clock::now() + kWaitTimeout;
  while (echo_rounds_.done.load() < n && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  const uint64_t got = echo_rounds_.done.load();
  echo_stop();
  if (got != n) return internal_error(std::to_string(got) + " pings arrived, not " + std::to_string(n));
  return ok_status();
}

std::string Target::handle(const std::vector<std::string>& w, bool* done) {
  if (w.empty()) return "error empty command";
  const std::string& cmd = w[0];
  std::vector<uint64_t> n(w.size(), 0);
  auto numbers = [&](size_t first, size_t last) {
    if (w.size() <= last) return false;
    for (size_t i = first; i <= last; ++i) {
      if (!parse_u64(w[i], &n[i])) return false;
    }
    return true;
  };
  auto reply = [](const Status& s) { return s.ok() ? std::string("ok") : error_reply(s); };
  const Status bad = invalid_argument("bad arguments to " + cmd);

  if (cmd == "bye") {
    *done = true;
    return "ok";
  }
  if (cmd == "setup") {
    Status s = setup(w);
    return s.ok() ? "ok " + main_->engine->provider() : error_reply(s);
  }
  if (cmd == "region") return numbers(1, 1) ? region(n[1]) : error_reply(bad);
  if (cmd == "clear") {
    if (!numbers(1, 1) || !main_ || n[1] > main_->region.size()) return error_reply(bad);
    std::memset(main_->region.data(), 0, n[1]);
    return "ok";
  }
  if (cmd == "wait") {
    if (!numbers(1, 2) || !main_) return error_reply(bad);
    return reply(wait_imms(*main_->engine, static_cast<uint32_t>(n[1]), n[2]));
  }
  if (cmd == "check") {
    if (!numbers(1, 3) || w.size() != 5 || !main_) return error_reply(bad);
    Status s = wait_imms(*main_->engine, static_cast<uint32_t>(n[1]), n[2]);
    if (s.ok()) s = compare_hash(main_->region, n[3], w[4]);
    return reply(s);
  }
  if (cmd == "raw_start") return reply(raw_start());
  if (cmd == "raw_stop") return reply(raw_stop());
  if (cmd == "raw_echo") return numbers(1, 2) && w.size() == 4 ? reply(raw_echo(static_cast<uint32_t>(n[1]), static_cast<uint32_t>(n[2]), w[3])) : error_reply(bad);
  if (cmd == "raw_echo_end") return numbers(1, 1) ? reply(raw_echo_end(n[1])) : error_reply(bad);
  if (cmd == "raw_wait") return numbers(1, 2) ? reply(raw_wait(static_cast<uint32_t>(n[1]), n[2])) : error_reply(bad);
  if (cmd == "raw_check") {
    if (!numbers(1, 3) || w.size() != 5 || !main_) return error_reply(bad);
    Status s = raw_wait(static_cast<uint32_t>(n[1]), n[2]);
    if (s.ok()) s = compare_hash(main_->region, n[3], w[4]);
    return reply(s);
  }
  if (cmd == "peers") return numbers(1, 2) ? peers(n[1], n[2]) : error_reply(bad);
  if (cmd == "peer_clear") {
    if (!numbers(1, 2) || n[1] > peers_.size() || n[2] > peer_bytes_) return error_reply(bad);
    for (size_t i = 0; i < n[1]; ++i) std::memset(peers_[i]->region.data(), 0, n[2]);
    return "ok";
  }
  if (cmd == "peer_check") {
    if (!numbers(1, 4) || w.size() != 6 || n[1] >= peers_.size()) return error_reply(bad);
    EngineWithRegion& p = *peers_[n[1]];
    Status s = wait_imms(*p.engine, static_cast<uint32_t>(n[2]), n[3]);
    if (s.ok()) s = compare_hash(p.region, n[4], w[5]);
    return reply(s);
  }
  if (cmd == "echo") {
    if (!numbers(1, 2) || w.size() < 4 || w.size() > 5 || (w.size() == 5 && w[4] != "progress")) return error_reply(bad);
    return reply(echo(static_cast<uint32_t>(n[1]), static_cast<uint32_t>(n[2]), w[3], w.size() == 5));
  }
  if (cmd == "echo_end") {
    return numbers(1, 2) ? reply(echo_end(static_cast<uint32_t>(n[1]), n[2])) : error_reply(bad);
  }
  return "error unknown command " + cmd;
}

}  // namespace

int serve_target(tools::ControlChannel channel, const std::string& interface_override) {
  Target target(interface_override);
  bool done = false;
  while (!done) {
    std::optional<std::string> command = channel.recv(kIdleTimeout);
    if (!command) return 1;  // the initiator vanished
    const std::string answer = target.handle(tools::split_words(*command), &done);
    if (!channel.send(answer)) return 1;
  }
  return 0;
}

}  // namespace fabric_lib::bench

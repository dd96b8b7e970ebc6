#include "fabric_bench/initiator.h"

#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <thread>

namespace fabric_lib::bench {

void Progress::step(const std::string& text) {
  ++done_;
  if (!enabled_) return;
  std::fprintf(stderr, "fabric-bench [%zu/%zu] %s\n", done_, total_, text.c_str());
  std::fflush(stderr);
}

void Progress::note(const std::string& text) {
  if (!enabled_) return;
  std::fprintf(stderr, "fabric-bench: %s\n", text.c_str());
  std::fflush(stderr);
}

void relax(uint32_t& spins) {
  if (++spins < 64) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
    return;
  }
  sched_yield();
}

Initiator::~Initiator() {
  if (engine_) engine_->stop();
}

Status Initiator::start() {
  Result<std::vector<std::string>> setup = peer_.call("setup " + encode_engine_config(config_));
  if (!setup.ok()) return setup.status();
  Result<std::unique_ptr<TransferEngine>> engine = build_bench_engine(config_, false);
  if (!engine.ok()) return engine.status();
  engine_ = std::move(engine).value();
  provider_ = engine_->provider();
  Result<std::unique_ptr<RawFabric>> raw = RawFabric::open(config_.provider, config_.interface_name, config_.domains);
  if (!raw.ok()) return raw.status();
  raw_ = std::move(raw).value();
  return ok_status();
}

uint32_t Initiator::next_imm() { return imm_seq_++ % 250 + 1; }

Result<EngineRunResult> Initiator::run_engine(const EngineSubmitFn& submit, uint32_t imm, size_t window,
                                              uint64_t max_requests, std::chrono::duration<double> duration) {
  using Clock = std::chrono::steady_clock;
  window = std::max<size_t>(window, 1);
  CompletionCounter done;
  uint64_t submitted = 0;
  const auto start = Clock::now();
  const auto deadline = duration.count() > 0 ? start + std::chrono::duration_cast<Clock::duration>(duration)
                                             : Clock::time_point::max();
  Status failure;
  while (true) {
    if ((max_requests && submitted >= max_requests) || (submitted % 8 == 0 && Clock::now() >= deadline)) break;
    uint32_t spins = 0;
    while (submitted - done.finished() >= window) relax(spins);
    Result<TransferId> id = submit(submitted, imm, Completion::counter(done));
    if (!id.ok()) {
      failure = id.status();
      break;
    }
    ++submitted;
  }
  const auto drain_deadline = Clock::now() + std::chrono::seconds(120);
  uint32_t spins = 0;
  while (done.finished() < submitted) {
    if (Clock::now() > drain_deadline) return Status(ErrorCode::kDeadlineExceeded, "engine requests did not complete");
    relax(spins);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (!failure.ok()) return failure;
  if (done.errors.load() != 0) {
    return Status(ErrorCode::kProviderError, std::to_string(done.errors.load()) + " engine requests failed");
  }
  return EngineRunResult{submitted, seconds};
}

Row Initiator::row(const std::string& mode, uint64_t size) const {
  Row r;
  r.mode = mode;
  r.provider = provider_;
  r.domains = config_.domains;
  r.size = size;
  return r;
}

}  // namespace fabric_lib::bench

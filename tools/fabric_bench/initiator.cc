#include "fabric_bench/initiator.h"

#include <sched.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
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
  EngineConfig target = config_;
  target.spin = options_.target_spin;
  Result<std::vector<std::string>> setup = peer_.call("setup " + encode_engine_config(target));
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

namespace {
// The event-driven application: each completion callback (on the engine's callback thread)
// submits the next request, and the calling thread sleeps until the run is over. On a machine with
// fewer cores than busy threads this leaves the CPU to the engine's worker and the target, where a
// polling caller would compete with them; see --drive.
Result<EngineRunResult> run_by_callbacks(const EngineSubmitFn& submit, uint32_t imm, size_t window,
                                         uint64_t max_requests, std::chrono::duration<double> duration) {
  using Clock = std::chrono::steady_clock;
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    uint64_t next = 0, completed = 0, errors = 0, refused = 0;  // requests numbered, ended, failed, not accepted
    bool admitting = true;
    Status failure;
    Clock::time_point deadline;
    uint64_t max_requests = 0;
    const EngineSubmitFn* submit = nullptr;
    uint32_t imm = 0;
  };
  auto sh = std::make_shared<Shared>();
  const auto start = Clock::now();
  sh->deadline = duration.count() > 0 ? start + std::chrono::duration_cast<Clock::duration>(duration) : Clock::time_point::max();
  sh->max_requests = max_requests;
  sh->submit = &submit;
  sh->imm = imm;
  // Starts the next request; false when none was started (done, or a submit failed).
  std::weak_ptr<Shared> weak = sh;
  // Callbacks hold the launcher weakly: it lives as long as this function, and a callback that
  // runs later (none should) finds it gone instead of running a destroyed function.
  auto launch_fn = std::make_shared<std::function<bool()>>();
  std::weak_ptr<std::function<bool()>> weak_launch = launch_fn;
  *launch_fn = [weak, weak_launch]() -> bool {
    auto s = weak.lock();
    if (!s) return false;
    uint64_t i;
    {
      std::lock_guard lock(s->mu);
      if (!s->admitting || (s->max_requests && s->next >= s->max_requests) || Clock::now() >= s->deadline) {
        s->admitting = false;
        s->cv.notify_all();
        return false;
      }
      i = s->next++;
    }
    Result<TransferId> id = (*s->submit)(i, s->imm, Completion::callback([weak, weak_launch](const Status& st) {
      auto s2 = weak.lock();
      if (!s2) return;
      // Launch the successor before counting this one done, so the waiter cannot see
      // completed == next while a launch is still under way.
      if (auto launch = weak_launch.lock()) (*launch)();
      std::lock_guard lock(s2->mu);
      ++s2->completed;
      if (!st.ok()) ++s2->errors;
      // The waiter only cares once admission has ended: waking it per completion would cost the
      // engine a context switch per request on a machine with few cores.
      if (!s2->admitting) s2->cv.notify_all();
    }));
    if (!id.ok()) {
      std::lock_guard lock(s->mu);
      ++s->refused;
      s->admitting = false;
      s->failure = id.status();
      s->cv.notify_all();
      return false;
    }
    return true;
  };
  for (size_t k = 0; k < window; ++k) {
    if (!(*launch_fn)()) break;
  }
  std::unique_lock lock(sh->mu);
  const bool ok = sh->cv.wait_for(lock, std::chrono::seconds(300) + duration, [&] { return !sh->admitting && sh->completed + sh->refused == sh->next; });
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const uint64_t n = sh->next - sh->refused;
  if (!ok) return Status(ErrorCode::kDeadlineExceeded, "engine requests did not complete");
  if (!sh->failure.ok()) return sh->failure;
  if (sh->errors) return Status(ErrorCode::kProviderError, std::to_string(sh->errors) + " engine requests failed");
  return EngineRunResult{n, seconds};
}
}  // namespace

Result<EngineRunResult> Initiator::run_engine(const EngineSubmitFn& submit, uint32_t imm, size_t window,
                                              uint64_t max_requests, std::chrono::duration<double> duration) {
  using Clock = std::chrono::steady_clock;
  window = std::max<size_t>(window, 1);
  if (options_.drive == "callback") return run_by_callbacks(submit, imm, window, max_requests, duration);
  // --drive poll: a poll-mode application. This thread submits, and reaps the completions itself
  // with TransferEngine::progress() (one thread posts and polls, as the raw loop does); the worker
  // stays idle unless this thread falls behind.
  CompletionCounter done;
  uint64_t submitted = 0;
  const auto start = Clock::now();
  const auto deadline = duration.count() > 0 ? start + std::chrono::duration_cast<Clock::duration>(duration)
                                             : Clock::time_point::max();
  Status failure;
  while (true) {
    if ((max_requests && submitted >= max_requests) || (submitted % 8 == 0 && Clock::now() >= deadline)) break;
    uint32_t spins = 0;
    while (submitted - done.finished() >= window) {
      if (engine_->progress() == 0) relax(spins);  // yields now and then: the target may share the cores
    }
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
    if (engine_->progress() == 0) relax(spins);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (!failure.ok()) return failure;
  if (done.errors.load() != 0) {
    return Status(ErrorCode::kProviderError, std::to_string(done.errors.load()) + " engine requests failed");
  }
  return EngineRunResult{submitted, seconds};
}

Result<std::unique_ptr<TransferEngine>> Initiator::build_latency_engine() const {
  EngineConfig config = config_;
  // Busy-polling needs a core of its own: with fewer than 4 CPUs a spinning worker starves the
  // target's threads until the next scheduler tick (round trips of exactly 4 ms were seen on a
  // 2-core machine), so there the mode keeps the initiator's own setting.
  if (std::thread::hardware_concurrency() >= 4) config.spin = true;
  return build_bench_engine(config, /*record_submit_latency=*/true);
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

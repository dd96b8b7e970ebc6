// imm (round-trip latency) and submit (API call to first WR posted).
#include <chrono>
#include <cstdio>

#include "common/pattern.h"
#include "fabric_bench/modes.h"
#include "fabric_bench/stats.h"

namespace fabric_lib::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kWarmup = 20;
constexpr auto kRoundTripTimeout = std::chrono::seconds(30);

void fill_latency(Row& row, const std::optional<LatencySummary>& s) {
  if (!s) return;
  row.p50_us = s->p50;
  row.p99_us = s->p99;
}

std::string latency_text(const std::optional<LatencySummary>& s) {
  char buf[128];
  std::snprintf(buf, sizeof(buf), "p50 %.2f us, p99 %.2f us (%zu samples)", s ? s->p50 : 0.0, s ? s->p99 : 0.0,
                s ? s->count : size_t{0});
  return buf;
}

}  // namespace

Status run_imm_mode(Initiator& init, std::vector<Row>& rows) {
  const BenchOptions& o = init.options();
  AlignedBuffer inbox(4096);  // before the engine, so it outlives every write into it
  Result<std::unique_ptr<TransferEngine>> built = init.build_latency_engine();
  if (!built.ok()) return built.status();
  TransferEngine& engine = **built;
  // The target's region receives the pings; ours receives the pongs.
  Result<std::vector<std::string>> reply = init.peer().call("region 4096");
  if (!reply.ok()) return reply.status();
  if (reply->empty()) return malformed("empty region reply");
  const std::vector<std::string> region_reply = *reply;  // [engine descriptor, raw region]
  Result<MrDesc> target = MrDesc::from_hex((*reply)[0]);
  if (!target.ok()) return target.status();
  Result<MrRegistration> mine = engine.register_memory(inbox.data(), inbox.size(), Access::kRemoteWrite);
  if (!mine.ok()) return mine.status();
  // Twice: first the worker threads see the imms (each side's app thread spins on a counter they
  // bump), then both app threads call progress() in their loops and see the imms themselves.
  for (const bool on_caller : {false, true}) {
    const uint32_t ping = init.next_imm();
    const uint32_t pong = init.next_imm();
    reply = init.peer().call("echo " + std::to_string(ping) + " " + std::to_string(pong) + " " + mine->desc.to_hex() +
                             (on_caller ? " progress" : ""));
    if (!reply.ok()) return reply.status();
    const size_t total = kWarmup + o.latency_iterations;
    std::vector<double> rtt_us;
    rtt_us.reserve(o.latency_iterations);
    Status failure;
    for (size_t i = 0; i < total && failure.ok(); ++i) {
      const auto t0 = Clock::now();
      Result<TransferId> id = engine.submit_imm(ping, *target, Completion());
      if (!id.ok()) {
        failure = id.status();
        break;
      }
      uint32_t spins = 0;
      while (engine.imms().count(pong) < i + 1) {
        if (Clock::now() - t0 > kRoundTripTimeout) {
          failure = Status(ErrorCode::kDeadlineExceeded, "imm round trip " + std::to_string(i) + " never came back");
          break;
        }
        if (!on_caller || engine.progress() == 0) relax(spins);
      }
      if (i >= kWarmup) rtt_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    // The target checks it saw exactly `total` pings; we check exactly `total` pongs.
    reply = init.peer().call("echo_end " + std::to_string(ping) + " " + std::to_string(total));
    const uint64_t pongs = engine.imms().count(pong);
    engine.imms().release(pong);
    if (!failure.ok()) return failure;
    if (!reply.ok()) return reply.status();
    if (pongs != total) return internal_error("imm mode: " + std::to_string(pongs) + " pongs for " + std::to_string(total) + " pings");
    const std::optional<LatencySummary> s = summarize(rtt_us);
    Row row = init.row(on_caller ? "imm-progress" : "imm", 0);
    fill_latency(row, s);
    rows.push_back(row);
    init.progress().step(init.provider() + " imm round trip" + (on_caller ? " (progress() on both sides), " : ", ") +
                         std::to_string(init.config().domains) + " domain(s): " + latency_text(s));
  }
  engine.unregister_memory(mine->handle);
  engine.stop();
  init.note_verified();

  // The same round trip with raw fi_writedata on both sides (the target's raw poller echoes).
  if (region_reply.size() < 2) return malformed("region reply without the target's raw region");
  Result<RawRemoteRegion> target_raw = decode_raw_region(region_reply[1]);
  if (!target_raw.ok()) return target_raw.status();
  Result<RawRemoteRegion> mine_raw = init.raw().register_region(inbox.data(), inbox.size(), true);
  if (!mine_raw.ok()) return mine_raw.status();
  FABRIC_LIB_RETURN_IF_ERROR(init.raw().connect(*target_raw));
  const size_t total = kWarmup + o.latency_iterations;
  const uint32_t raw_ping = init.next_imm();
  const uint32_t raw_pong = init.next_imm();
  Result<std::vector<std::string>> echo = init.peer().call("raw_echo " + std::to_string(raw_ping) + " " +
                                                           std::to_string(raw_pong) + " " + encode_raw_region(*mine_raw));
  if (!echo.ok()) return echo.status();
  Result<std::vector<double>> raw_rtt = init.raw().round_trip(raw_ping, raw_pong, total, std::chrono::seconds(30));
  echo = init.peer().call("raw_echo_end " + std::to_string(total));
  if (!raw_rtt.ok()) return raw_rtt.status();
  if (!echo.ok()) return echo.status();
  std::vector<double> raw_samples(raw_rtt->begin() + static_cast<std::ptrdiff_t>(std::min(kWarmup, raw_rtt->size())),
                                  raw_rtt->end());
  const std::optional<LatencySummary> raw = summarize(raw_samples);
  Row row = init.row("imm-raw", 0);
  fill_latency(row, raw);
  rows.push_back(row);
  init.progress().step(init.provider() + " raw imm round trip: " + latency_text(raw));
  return ok_status();
}

Status run_submit_mode(Initiator& init, std::vector<Row>& rows) {
  const BenchOptions& o = init.options();
  const uint64_t size = o.submit_bytes;
  AlignedBuffer src(size);  // before the engine, so it outlives every write from it
  Result<std::unique_ptr<TransferEngine>> built = init.build_latency_engine();
  if (!built.ok()) return built.status();
  TransferEngine& engine = **built;
  Result<std::vector<std::string>> reply = init.peer().call("region " + std::to_string(size));
  if (!reply.ok()) return reply.status();
  if (reply->empty()) return malformed("empty region reply");
  const std::vector<std::string> region_reply = *reply;  // [engine descriptor, raw region]
  Result<MrDesc> dst = MrDesc::from_hex((*reply)[0]);
  if (!dst.ok()) return dst.status();
  tools::fill_pattern(src.data(), size, o.seed);
  Result<MrRegistration> mr = engine.register_memory(src.data(), size, Access::kLocalOnly);
  if (!mr.ok()) return mr.status();
  const WriteRequest proto{mr->handle, 0, *dst, 0, size, std::nullopt};
  WriteRequest with_imm = proto;
  with_imm.imm = 1;
  const uint64_t imms_per = imm_count_of(with_imm, init.config().domains);
  auto submit = [&](uint64_t, uint32_t imm, Completion done) {
    WriteRequest r = proto;
    r.imm = imm;
    return engine.submit_write(std::move(r), std::move(done));
  };
  // run_engine drives the initiator's main engine; this mode has its own, so it loops itself:
  // one request in flight (the unloaded path: nothing queued ahead of the measured request).
  std::vector<double> call_us;  // how long the submit call itself took (the caller's side)
  bool on_caller = false;       // the caller waits by calling progress() (the second pass)
  auto run = [&](uint32_t imm, uint64_t n) -> Status {
    for (uint64_t i = 0; i < n; ++i) {
      CompletionCounter done;
      const auto t0 = Clock::now();
      Result<TransferId> id = submit(i, imm, Completion::counter(done));
      call_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      if (!id.ok()) return id.status();
      uint32_t spins = 0;
      while (done.finished() < 1) {
        if (Clock::now() - t0 > kRoundTripTimeout) return Status(ErrorCode::kDeadlineExceeded, "write did not complete");
        if (!on_caller || engine.progress() == 0) relax(spins);
      }
      if (done.errors.load() != 0) return Status(ErrorCode::kProviderError, "a submit-mode write failed");
    }
    return ok_status();
  };

  // Verification: one write onto a cleared region, checked at the target.
  reply = init.peer().call("clear " + std::to_string(size));
  if (!reply.ok()) return reply.status();
  uint32_t imm = init.next_imm();
  FABRIC_LIB_RETURN_IF_ERROR(run(imm, 1));
  reply = init.peer().call("check " + std::to_string(imm) + " " + std::to_string(imms_per) + " " + std::to_string(size) +
                           " " + std::to_string(hash_region(src.data(), size)));
  if (!reply.ok()) return Status(reply.status().code(), "submit mode: " + reply.status().message());
  init.note_verified();

  // Twice: the worker reaps each write's completion (the caller spins on its counter), then the
  // caller reaps it with progress() — the worker then stays asleep instead of sharing the cores.
  for (const bool pass_on_caller : {false, true}) {
    on_caller = pass_on_caller;
    imm = init.next_imm();
    FABRIC_LIB_RETURN_IF_ERROR(run(imm, kWarmup));
    engine.take_submit_latencies_ns();  // drop the warm-up's samples
    call_us.clear();
    FABRIC_LIB_RETURN_IF_ERROR(run(imm, o.latency_iterations));
    const std::vector<uint32_t> samples = engine.take_submit_latencies_ns();
    reply = init.peer().call("wait " + std::to_string(imm) + " " + std::to_string((kWarmup + o.latency_iterations) * imms_per));
    if (!reply.ok()) return reply.status();
    if (samples.size() != o.latency_iterations) {
      return internal_error("submit mode: " + std::to_string(samples.size()) + " latency samples for " +
                            std::to_string(o.latency_iterations) + " requests");
    }
    const std::optional<LatencySummary> s = summarize_ns_as_us(samples);
    Row row = init.row(on_caller ? "submit-progress" : "submit", size);
    fill_latency(row, s);
    rows.push_back(row);
    init.progress().step(init.provider() + " submit overhead (call to first WR handed to the provider)" +
                         (on_caller ? " with progress() reaping, " : ", ") + format_size(size) + ": " + latency_text(s) +
                         "; the submit call itself returned after " + latency_text(summarize(call_us)));
  }
  engine.unregister_memory(mr->handle);
  engine.stop();

  // The raw baseline, same bytes: the duration of one fi_writedata call into the target's raw
  // region (its raw poller answers the provider), timed the same way (the call's start to its
  // return), one write in flight at a time.
  if (region_reply.size() < 2) return malformed("region reply without the target's raw region");
  Result<RawRemoteRegion> raw_dst = decode_raw_region(region_reply[1]);
  if (!raw_dst.ok()) return raw_dst.status();
  Result<RawRemoteRegion> raw_src = init.raw().register_region(src.data(), size, false);
  if (!raw_src.ok()) return raw_src.status();
  const uint32_t raw_imm = init.next_imm();
  const size_t total = kWarmup + o.latency_iterations;
  reply = init.peer().call("raw_start");
  if (!reply.ok()) return reply.status();
  FABRIC_LIB_RETURN_IF_ERROR(init.raw().connect(*raw_dst));
  Result<std::vector<double>> raw_post_us = init.raw().post_call_times(size, total, raw_imm, kRoundTripTimeout);
  if (raw_post_us.ok()) reply = init.peer().call("raw_wait " + std::to_string(raw_imm) + " " + std::to_string(total));
  Result<std::vector<std::string>> stopped = init.peer().call("raw_stop");
  if (!raw_post_us.ok()) return raw_post_us.status();
  if (!reply.ok()) return Status(reply.status().code(), "submit mode, raw writes: " + reply.status().message());
  if (!stopped.ok()) return stopped.status();
  const std::optional<LatencySummary> raw = summarize(
      std::vector<double>(raw_post_us->begin() + static_cast<std::ptrdiff_t>(std::min(kWarmup, raw_post_us->size())),
                          raw_post_us->end()));
  Row raw_row = init.row("submit-raw", size);
  fill_latency(raw_row, raw);
  rows.push_back(raw_row);
  init.progress().step(init.provider() + " raw fi_writedata call, " + format_size(size) + ": " + latency_text(raw));
  return ok_status();
}

}  // namespace fabric_lib::bench

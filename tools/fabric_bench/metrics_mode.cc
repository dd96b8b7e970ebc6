// metrics: what the engine's metrics cost. The op rate of --submit-bytes writes (window full)
// through an engine with metrics on (the default: latency histograms, per-peer cells, the clock
// reads they need) against an engine of the same configuration with TransferEngineBuilder::
// metrics(false) (the per-operation and per-domain counters stats() reads stay), alternating runs
// in this process. The verdict's ratio is the median over the pairs of on / off (each pair runs
// back to back, so load that drifts during the run cancels); the op rates shown are the best of
// each side. Both are verified at the target first, and the metrics-on
// engine's own counts are checked against what it was asked to do, so the run cannot measure
// metrics that were not recorded. Target (issue 17): on / off op rate >= 0.98.
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "common/pattern.h"
#include "fabric_bench/modes.h"
#include "fabric_bench/stats.h"

namespace fabric_lib::bench {
namespace {

// Back-to-back pairs (single pairs vary by +-30% on a busy 2-core machine); an even count, so
// that each side goes first equally often and an order effect cancels in the median.
constexpr size_t kMinRepeats = 20;

// CPU seconds this process has used (both engines' threads and the caller).
double process_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

struct MetricsSide {
  bool metrics = true;
  std::unique_ptr<TransferEngine> engine;
  MrRegistration mr;
  uint64_t requests = 0;  // submitted through it (verification and timed runs)
  Throughput best;
  uint64_t timed_requests = 0;  // over the timed runs
  double timed_cpu_s = 0;       // this process's CPU time during them

  ~MetricsSide() {
    if (!engine) return;
    if (mr.handle.valid()) engine->unregister_memory(mr.handle);
    engine->stop();
  }
};

}  // namespace

Status run_metrics_mode(Initiator& init, std::vector<Row>& rows) {
  const BenchOptions& o = init.options();
  const uint64_t size = o.submit_bytes;
  const size_t domains = init.config().domains;
  const size_t window = window_for(o, size);
  const uint64_t slots = std::max<uint64_t>(1, std::min<uint64_t>(window, o.max_region_bytes / size));
  const uint64_t region = slots * size;
  AlignedBuffer src(region);  // before the engines, so it outlives every write from it
  if (!src.ok()) return resource_exhausted("cannot allocate " + std::to_string(region) + " bytes");
  tools::fill_pattern(src.data(), region, o.seed);
  Result<std::vector<std::string>> reply = init.peer().call("region " + std::to_string(region));
  if (!reply.ok()) return reply.status();
  if (reply->empty()) return malformed("empty region reply");
  Result<MrDesc> dst = MrDesc::from_hex((*reply)[0]);
  if (!dst.ok()) return dst.status();

  MetricsSide sides[2];
  sides[1].metrics = false;
  for (MetricsSide& side : sides) {
    Result<std::unique_ptr<TransferEngine>> built = build_bench_engine(init.config(), false, side.metrics);
    if (!built.ok()) return built.status();
    side.engine = std::move(built).value();
    Result<MrRegistration> mr = side.engine->register_memory(src.data(), region, Access::kLocalOnly);
    if (!mr.ok()) return mr.status();
    side.mr = *mr;
  }
  const uint64_t imms_per_request = imm_count_of_write(size, RoundRobin{}, domains);
  auto submit_on = [&](MetricsSide& side) -> EngineSubmitFn {
    return [&side, &dst, size, slots](uint64_t i, uint32_t imm, Completion done) {
      const uint64_t off = (i % slots) * size;
      return side.engine->submit_write({side.mr.handle, off, *dst, off, size, imm}, std::move(done));
    };
  };

  // One full iteration through each engine, checked byte for byte at the target.
  const uint64_t hash = hash_region(src.data(), region);
  for (MetricsSide& side : sides) {
    reply = init.peer().call("clear " + std::to_string(region));
    if (!reply.ok()) return reply.status();
    const uint32_t imm = init.next_imm();
    Result<EngineRunResult> run = init.run_engine(submit_on(side), imm, window, slots, {});
    if (!run.ok()) return run.status();
    side.requests += run->requests;
    reply = init.peer().call("check " + std::to_string(imm) + " " + std::to_string(slots * imms_per_request) + " " +
                             std::to_string(region) + " " + std::to_string(hash));
    if (!reply.ok()) {
      return Status(reply.status().code(), std::string("metrics ") + (side.metrics ? "on" : "off") + ": " + reply.status().message());
    }
    init.note_verified();
  }

  // Timed runs in pairs, alternating which side goes first.
  const auto duration = o.iterations ? std::chrono::duration<double>(0) : std::chrono::duration<double>(o.duration_s);
  std::vector<double> pair_ratios;
  const size_t pairs = (std::max(o.repeats, kMinRepeats) + 1) / 2 * 2;
  for (size_t rep = 0; rep < pairs; ++rep) {
    double mops[2] = {0, 0};
    for (size_t k = 0; k < 2; ++k) {
      MetricsSide& side = sides[(rep + k) % 2];
      const uint32_t imm = init.next_imm();
      const double cpu0 = process_cpu_seconds();
      Result<EngineRunResult> run = init.run_engine(submit_on(side), imm, window, o.iterations, duration);
      if (!run.ok()) return run.status();
      side.timed_cpu_s += process_cpu_seconds() - cpu0;
      side.timed_requests += run->requests;
      side.requests += run->requests;
      reply = init.peer().call("wait " + std::to_string(imm) + " " + std::to_string(run->requests * imms_per_request));
      if (!reply.ok()) return reply.status();
      const Throughput t = throughput_of(run->requests * size, run->requests, run->seconds);
      if (t.mops > side.best.mops) side.best = t;
      mops[(rep + k) % 2] = t.mops;
    }
    if (mops[1] > 0) pair_ratios.push_back(mops[0] / mops[1]);
  }
  std::sort(pair_ratios.begin(), pair_ratios.end());

  // The metrics-on engine recorded every request: completions, one latency sample each, the peer.
  const Metrics m = sides[0].engine->metrics();
  const OpMetrics& w = m.op(OpType::kWrite);
  if (!m.detailed || w.requests_completed != sides[0].requests || w.request_latency.count != sides[0].requests ||
      m.peers.size() != 1 || m.bytes_written() != sides[0].requests * size) {
    return internal_error("metrics mode: the metrics-on engine counted " + std::to_string(w.requests_completed) +
                          " requests, " + std::to_string(w.request_latency.count) + " latency samples, " +
                          std::to_string(m.peers.size()) + " peers, " + std::to_string(m.bytes_written()) + " bytes for " +
                          std::to_string(sides[0].requests) + " requests of " + std::to_string(size) + " bytes");
  }
  const Metrics off = sides[1].engine->metrics();
  if (off.detailed || !off.peers.empty() || off.op(OpType::kWrite).request_latency.count != 0) {
    return internal_error("metrics mode: the metrics-off engine kept detailed metrics");
  }

  Row row = init.row("metrics", size);
  row.engine_gbps = sides[0].best.gbps;
  row.engine_mops = sides[0].best.mops;
  row.raw_gbps = sides[1].best.gbps;
  row.raw_mops = sides[1].best.mops;
  if (!pair_ratios.empty()) {
    const size_t n = pair_ratios.size();
    row.ratio = n % 2 ? pair_ratios[n / 2] : (pair_ratios[n / 2 - 1] + pair_ratios[n / 2]) / 2;
  }
  rows.push_back(row);
  // A diagnostic less exposed to other processes than the op rate: this process's CPU time per
  // request (the initiator's threads; the target's work is the same for both sides).
  auto cpu_us = [](const MetricsSide& s) { return s.timed_requests ? 1e6 * s.timed_cpu_s / s.timed_requests : 0.0; };
  char line[384];
  std::snprintf(line, sizeof(line),
                "%s metrics on vs off, %zu domain(s), %s writes, window %zu: best %.3f vs %.3f Mops, median of %zu "
                "pairs %.3fx (pairs %.3fx..%.3fx); initiator CPU per request %.2f vs %.2f us",
                init.provider().c_str(), domains, format_size(size).c_str(), window, sides[0].best.mops,
                sides[1].best.mops, pair_ratios.size(), row.ratio.value_or(0),
                pair_ratios.empty() ? 0.0 : pair_ratios.front(), pair_ratios.empty() ? 0.0 : pair_ratios.back(),
                cpu_us(sides[0]), cpu_us(sides[1]));
  init.progress().step(line);
  return ok_status();
}

}  // namespace fabric_lib::bench

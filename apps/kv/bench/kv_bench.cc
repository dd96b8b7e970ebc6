// fabric-kv-bench: the KV-transfer app against the engine it runs on, in the same run.
//   bandwidth  KV bytes/s of requests moved through Decoder + Prefiller vs the same paged writes
//              (same page size, pages and request count) submitted straight to the engine;
//              target: app >= 0.9 x engine.
//   rate       requests/s with `inflight` requests in flight, and per-request transfer time
//              (start -> finished) over `rate-requests` requests: the last 100 within 1.2 x the
//              first 100 once the pipeline is full (no slowdown under load; the first `inflight`
//              to finish started into an empty pipeline and waited behind fewer requests, so they
//              are left out of "first" and reported apart), and the time to finish those 100 vs
//              the last 100 (the throughput view of the same question).
// Both engines live in this process, over tcp or shm on this host. Prints a table, MET/MISSED per
// target, and writes CSV rows (section,provider,domains,page_bytes,metric,value,baseline,ratio,
// target,verdict) for kv_bench_plot.py.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "fabric_lib/kv/decoder.h"
#include "fabric_lib/kv/prefiller.h"

using namespace fabric_lib;
using namespace fabric_lib::kv;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  std::string provider = "tcp";
  size_t domains = 1;
  uint64_t page_bytes = 32 * 1024;
  uint32_t layers = 8;
  uint32_t pages = 32;       // per request (bandwidth)
  uint32_t requests = 64;    // per trial (bandwidth)
  int trials = 7;
  uint32_t rate_requests = 1000;
  uint32_t rate_pages = 4;
  uint32_t inflight = 64;
  std::string csv;
};

struct Side {
  std::unique_ptr<TransferEngine> engine;
  std::vector<uint8_t> memory;
  MrRegistration reg;
};

[[noreturn]] void die(const std::string& what, const Status& s) {
  std::fprintf(stderr, "fabric-kv-bench: %s: %s\n", what.c_str(), s.to_string().c_str());
  std::exit(1);
}

Side make_side(const Options& o, uint64_t bytes) {
  TransferEngineBuilder b;
  b.provider(o.provider).domains_per_group(o.domains);
  if (o.provider == "tcp") b.interfaces({"lo"});
  auto e = b.build();
  if (!e.ok()) die("engine", e.status());
  Side s;
  s.engine = std::move(e).value();
  s.memory.assign(bytes, 1);
  auto r = s.engine->register_memory(s.memory.data(), s.memory.size(), Access::kRemoteWrite);
  if (!r.ok()) die("register", r.status());
  s.reg = *r;
  return s;
}

struct Csv {
  std::vector<std::string> rows;
  void add(const Options& o, const std::string& section, const std::string& metric, double value, double baseline, double ratio,
           const std::string& target, const std::string& verdict) {
    char buf[512];
    std::snprintf(buf, sizeof(buf), "%s,%s,%zu,%llu,%s,%.6g,%.6g,%.4f,%s,%s", section.c_str(), o.provider.c_str(), o.domains,
                  static_cast<unsigned long long>(o.page_bytes), metric.c_str(), value, baseline, ratio, target.c_str(),
                  verdict.c_str());
    rows.push_back(buf);
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"fabric-kv-bench: KV transfer through fabric_lib::kv vs the engine's paged writes"};
  app.add_option("--provider", o.provider, "tcp or shm");
  app.add_option("--domains", o.domains);
  app.add_option("--page-bytes", o.page_bytes, "bytes of one K (or V) page");
  app.add_option("--layers", o.layers);
  app.add_option("--pages", o.pages, "pages per request (bandwidth)");
  app.add_option("--requests", o.requests, "requests per trial (bandwidth)");
  app.add_option("--trials", o.trials);
  app.add_option("--rate-requests", o.rate_requests, "requests in the rate run (the no-slowdown check needs >= inflight + 200)");
  app.add_option("--rate-pages", o.rate_pages, "pages per request (rate)");
  app.add_option("--inflight", o.inflight);
  app.add_option("--csv", o.csv, "write the results here");
  CLI11_PARSE(app, argc, argv);
  if (o.page_bytes % 32 != 0 || o.page_bytes < 32) die("options", invalid_argument("--page-bytes must be a multiple of 32"));

  // One KV head per rank, page_tokens 16, bf16: head_dim follows from the page size.
  const KvLayout layout{AttentionKind::kGqa, DType::kBF16, o.layers, 16, static_cast<uint32_t>(o.page_bytes / 32), 1};
  const uint32_t num_pages = std::max(o.requests * o.pages, o.inflight * o.rate_pages);
  uint64_t cache_bytes = 0;
  const KvMemoryLayout mem = KvMemoryLayout::contiguous(layout, 1, KvPacking::kSeparate, num_pages, 0, 0, &cache_bytes);
  const uint64_t tail_bytes = 4096;
  Side pre_side = make_side(o, cache_bytes + tail_bytes);
  Side dec_side = make_side(o, cache_bytes + tail_bytes * o.inflight);
  PrefillerOptions po;
  po.layout = layout;
  po.regions = {pre_side.reg};
  po.memory = mem;
  auto prefiller = Prefiller::create(*pre_side.engine, po);
  if (!prefiller.ok()) die("prefiller", prefiller.status());
  DecoderOptions dopt;
  dopt.layout = layout;
  dopt.regions = {dec_side.reg};
  dopt.memory = mem;
  auto decoder = Decoder::create(*dec_side.engine, dopt);
  if (!decoder.ok()) die("decoder", decoder.status());
  Prefiller& P = **prefiller;
  Decoder& D = **decoder;
  const PrefillInstance instance{1, KvPacking::kSeparate, {pre_side.engine->main_address()}};
  Csv csv;
  uint64_t next_id = 0;

  // --- bandwidth ------------------------------------------------------------------------------
  const uint64_t trial_bytes = uint64_t(o.requests) * o.pages * o.layers * 2 * o.page_bytes;
  std::vector<double> app_gbps, engine_gbps;
  for (int t = 0; t < o.trials; ++t) {
    // App: dispatches first (their latency is not KV bandwidth), then one pass with every layer done.
    std::vector<std::string> ids;
    std::vector<PassEntry> entries;
    for (uint32_t r = 0; r < o.requests; ++r) {
      const std::string id = "bw" + std::to_string(next_id++);
      std::vector<uint32_t> pages(o.pages);
      std::iota(pages.begin(), pages.end(), r * o.pages);
      DecodeRequest q{id, instance, o.pages * 16, 0, pages, 0, 0, 0, std::chrono::seconds(60)};
      if (Status s = D.start(q); !s.ok()) die("start", s);
      PrefillRequest pq{id, o.pages * 16, pages, 0, cache_bytes, std::chrono::seconds(60), 1};
      if (Status s = P.add_request(pq); !s.ok()) die("add_request", s);
      ids.push_back(id);
      entries.push_back({id, o.pages * 16});
    }
    for (const std::string& id : ids)
      while (P.poll(id) == KvPoll::kBootstrapping) P.wait_finished(std::chrono::milliseconds(1));
    auto pass = P.begin_pass(entries);
    const auto t0 = Clock::now();
    if (Status s = P.progress(*pass, o.layers + 1); !s.ok()) die("progress", s);
    size_t done = 0;
    while (done < ids.size()) {
      for (auto& f : D.wait_finished(std::chrono::seconds(60))) {
        if (!f.status.ok()) die("request", f.status);
        ++done;
      }
    }
    app_gbps.push_back(trial_bytes * 8 / std::chrono::duration<double>(Clock::now() - t0).count() / 1e9);
    while (P.get_finished().size() < ids.size() && P.stats().active_requests > 0) P.wait_finished(std::chrono::milliseconds(10));

    // Engine: the same paged writes (one request per request, layer and K/V), counted by one imm.
    const uint32_t imm = 0x1000000 + t;
    CompletionCounter expected;
    const uint64_t total_pages = uint64_t(o.requests) * o.layers * 2 * o.pages;
    if (Status s = dec_side.engine->imms().expect(imm, total_pages, Completion::counter(expected)); !s.ok()) die("expect", s);
    const auto t1 = Clock::now();
    for (uint32_t r = 0; r < o.requests; ++r)
      for (uint32_t l = 0; l < o.layers; ++l)
        for (int kvv = 0; kvv < 2; ++kvv) {
          PagedWriteRequest w;
          w.src = pre_side.reg.handle;
          w.dst = dec_side.reg.desc;
          w.page_length = o.page_bytes;
          w.src_pages.resize(o.pages);
          std::iota(w.src_pages.begin(), w.src_pages.end(), r * o.pages);
          w.dst_pages = w.src_pages;
          w.src_stride = w.dst_stride = mem.page_stride;
          w.src_offset = w.dst_offset = (kvv == 0 ? mem.k[l] : mem.v[l]).offset;
          w.imm = imm;
          auto id = pre_side.engine->submit_paged_writes(std::move(w), Completion());
          if (!id.ok()) die("submit", id.status());
        }
    if (!expected.wait_for(1, std::chrono::seconds(60))) die("baseline", internal_error("imms did not arrive"));
    engine_gbps.push_back(trial_bytes * 8 / std::chrono::duration<double>(Clock::now() - t1).count() / 1e9);
  }
  // Each app trial is paired with the engine trial right after it: the ratio of a pair sees the
  // same machine load (this machine is shared), the median of the pairs is the figure.
  std::vector<double> pair_ratios;
  for (size_t t = 0; t < app_gbps.size(); ++t) pair_ratios.push_back(app_gbps[t] / engine_gbps[t]);
  const double app_bw = median(app_gbps), eng_bw = median(engine_gbps), bw_ratio = median(pair_ratios);
  std::printf("== KV bandwidth, %s, %zu domain(s), %llu-byte pages, %u layers x %u requests x %u pages (median of %d)\n",
              o.provider.c_str(), o.domains, static_cast<unsigned long long>(o.page_bytes), o.layers, o.requests, o.pages, o.trials);
  std::printf("  app %.2f Gbps   engine paged writes %.2f Gbps   ratio (median of paired trials) %.3f   target >= 0.90: %s\n",
              app_bw, eng_bw, bw_ratio,
              bw_ratio >= 0.9 ? "MET" : "MISSED");
  csv.add(o, "bandwidth", "gbps", app_bw, eng_bw, bw_ratio, ">=0.9x", bw_ratio >= 0.9 ? "MET" : "MISSED");

  // --- request rate, and no slowdown under load -----------------------------------------------
  std::vector<uint32_t> free_slots(o.inflight);
  std::iota(free_slots.begin(), free_slots.end(), 0);
  std::vector<std::pair<Clock::time_point, uint32_t>> open(o.rate_requests + next_id + 1);
  std::vector<double> latency_us;
  std::vector<Clock::time_point> finished_at;  // completion order, as latency_us
  uint32_t launched = 0;
  const uint64_t base = next_id;
  auto launch = [&] {
    const uint32_t slot = free_slots.back();
    free_slots.pop_back();
    const uint64_t n = next_id++;
    const std::string id = "rt" + std::to_string(n);
    std::vector<uint32_t> pages(o.rate_pages);
    std::iota(pages.begin(), pages.end(), slot * o.rate_pages);
    open[n - base] = {Clock::now(), slot};
    DecodeRequest q{id, instance, o.rate_pages * 16, 0, pages, 0, cache_bytes + slot * tail_bytes, 64, std::chrono::seconds(60)};
    if (Status s = D.start(q); !s.ok()) die("start", s);
    PrefillRequest pq{id, o.rate_pages * 16, pages, 0, cache_bytes, std::chrono::seconds(60), 1};
    if (Status s = P.add_request(pq); !s.ok()) die("add_request", s);
    auto pass = P.begin_pass({{id, o.rate_pages * 16}});
    if (!pass.ok()) die("pass", pass.status());
    if (Status s = P.progress(*pass, o.layers + 1); !s.ok()) die("progress", s);
    ++launched;
  };
  const auto r0 = Clock::now();
  while (launched < std::min(o.inflight, o.rate_requests)) launch();
  while (latency_us.size() < o.rate_requests) {
    for (auto& f : D.wait_finished(std::chrono::seconds(60))) {
      if (!f.status.ok()) die("request " + f.id, f.status);
      const uint64_t n = std::stoull(f.id.substr(2));
      const Clock::time_point now = Clock::now();
      latency_us.push_back(std::chrono::duration<double, std::micro>(now - open[n - base].first).count());
      finished_at.push_back(now);
      free_slots.push_back(open[n - base].second);
      if (launched < o.rate_requests) launch();
    }
    P.get_finished();
  }
  const double secs = std::chrono::duration<double>(Clock::now() - r0).count();
  const double rps = o.rate_requests / secs;
  std::printf("== requests/s, %u in flight, %u pages x %u layers per request: %.0f requests/s (%u in %.2f s)\n", o.inflight,
              o.rate_pages, o.layers, rps, o.rate_requests, secs);
  csv.add(o, "rate", "requests_per_s", rps, 0, 0, "", "");
  const size_t fill = std::min<size_t>(o.inflight, latency_us.size());
  if (latency_us.size() >= fill + 200) {
    // Latencies in completion order. "First 100": the first 100 to finish after the pipeline
    // filled (completions fill .. fill + 99); the fill itself is printed for comparison.
    auto median_of = [&](size_t from, size_t n) {
      return median(std::vector<double>(latency_us.begin() + from, latency_us.begin() + from + n));
    };
    const size_t n = latency_us.size();
    const double f = median_of(fill, 100), l = median_of(n - 100, 100), ratio = l / f;
    const double with_fill = l / median_of(0, 100);
    std::printf("  per-request transfer time, median: first 100 after the pipeline filled %.0f us, last 100 %.0f us, "
                "ratio %.2f   target <= 1.2: %s\n",
                f, l, ratio, ratio <= 1.2 ? "MET" : "MISSED");
    std::printf("    (the first 100 to finish, pipeline fill included: %.0f us, ratio %.2f; not the target: they waited "
                "behind fewer than %u requests)\n",
                median_of(0, 100), with_fill, o.inflight);
    csv.add(o, "rate", "last100_over_first100", l, f, ratio, "<=1.2x", ratio <= 1.2 ? "MET" : "MISSED");
    csv.add(o, "rate", "last100_over_first100_with_fill", l, median_of(0, 100), with_fill, "", "");
    // Throughput view: time to finish 100 requests, first block after the fill vs the last block.
    auto block_s = [&](size_t from) {
      return std::chrono::duration<double>(finished_at[from + 99] - finished_at[from == 0 ? 0 : from - 1]).count();
    };
    const double fb = block_s(fill), lb = block_s(n - 100), block_ratio = lb / fb;
    std::printf("  time to finish 100 requests: first block after the fill %.3f s, last block %.3f s, ratio %.2f   "
                "target <= 1.2: %s\n",
                fb, lb, block_ratio, block_ratio <= 1.2 ? "MET" : "MISSED");
    csv.add(o, "rate", "last100_block_over_first100_block", lb, fb, block_ratio, "<=1.2x", block_ratio <= 1.2 ? "MET" : "MISSED");
  } else {
    std::printf("  (no-slowdown check skipped: it needs --rate-requests >= inflight + 200 = %zu)\n", fill + 200);
  }
  DecoderStats ds = D.stats();
  std::printf("  decoder: %llu started, %llu succeeded, %llu failed, %zu active\n",
              static_cast<unsigned long long>(ds.requests_started), static_cast<unsigned long long>(ds.requests_succeeded),
              static_cast<unsigned long long>(ds.requests_failed), ds.active_requests);
  if (!o.csv.empty()) {
    std::ofstream out(o.csv);
    out << "section,provider,domains,page_bytes,metric,value,baseline,ratio,target,verdict\n";
    for (const std::string& r : csv.rows) out << r << "\n";
  }
  D.shutdown();
  P.shutdown();
  return 0;
}

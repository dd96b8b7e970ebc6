// moe_device_rank: one GPU rank of the device tests and the benchmark, in its own process (the
// same line protocol as tests/rank/moe_rank.cc: "info", "infos ...", "connected", "step <t> ok
// <digest>" or "step <t> error ...", "done", then "exit" from the launcher).
// Options (key=value): rank world device provider domains path(proxy|direct) shape(decode|
// prefill|small) steps seed mode(test|graph|bench) replays iterations timeout_ms spin.
//   test   every step checked against the host reference (dispatch rows and counts, combine
//          bit for bit), digests printed
//   graph  one step captured in a CUDA graph, replayed `replays` times; inputs changed between
//          replays (outside the graph) and every 10th replay checked
//   bench  `iterations` steps timed with events around each half; prints "csv,..." rows (see
//          bench_rows()) and the proxy's reaction and posting times
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <sstream>
#include <string>

#include "fabric_lib/fabric_lib.h"
#include "gpu_rank.h"
#include "gpu_clock.h"

using namespace fabric_lib;
using namespace fabric_lib::moe;
using namespace fabric_lib::moe::testing;

namespace {

std::map<std::string, std::string> g_args;
std::string arg(const std::string& k, const std::string& d) { return g_args.count(k) ? g_args[k] : d; }
uint64_t num(const std::string& k, uint64_t d) { return g_args.count(k) ? std::strtoull(g_args[k].c_str(), nullptr, 0) : d; }
void say(const std::string& s) { std::cout << s << std::endl; }

MoeConfig config_for(const std::string& shape, uint32_t world, uint32_t rank) {
  MoeConfig c;
  c.world_size = world;
  c.rank = rank;
  c.in_dtype = DType::kFp8E4M3;
  c.out_dtype = DType::kBf16;
  if (shape == "small") {  // sanitizer runs
    c.max_num_tokens = 32;
    c.num_experts = 32;
    c.experts_per_token = 4;
    c.hidden_dim = 512;
  } else {  // DeepSeek-V3: hidden 7168, 256 experts, top-8, fp8 with per-128 scales
    c.max_num_tokens = shape == "prefill" ? 4096 : 128;
    c.num_experts = 256;
    c.experts_per_token = 8;
    c.hidden_dim = 7168;
  }
  c.hidden_dim_scale = c.hidden_dim / 128;
  // The global batch is the same for every EP size: M tokens per rank of EP 1 ... split evenly.
  return c;
}

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p / 100.0 * (v.size() - 1) + 0.5))];
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    const size_t eq = a.find('=');
    if (eq != std::string::npos) g_args[a.substr(0, eq)] = a.substr(eq + 1);
  }
  const uint32_t world = num("world", 1), rank = num("rank", 0);
  const std::string shape = arg("shape", "decode"), mode = arg("mode", "test"), path = arg("path", "proxy");
  const int device = static_cast<int>(num("device", 0));
  if (cudaSetDevice(device) != cudaSuccess) {
    say("error no device");
    return 2;
  }
  MoeConfig c = config_for(shape, world, rank);
  c.path = path == "direct" ? Path::kDirect : Path::kProxy;
  c.step_timeout = std::chrono::milliseconds(num("timeout_ms", 10000));
  c.proxy_idle = num("spin", 0) ? IdlePolicy::kSpin : IdlePolicy::kAdaptive;
  const uint32_t global_tokens = c.max_num_tokens * static_cast<uint32_t>(num("global_ranks", world));
  c.max_num_tokens = global_tokens / world;

  TransferEngineBuilder b;
  b.provider(arg("provider", "ipc")).domains_per_group(num("domains", 1)).record_submit_latency(mode == "bench");
  if (num("spin", 0)) b.idle_policy(IdlePolicy::kSpin);
  Result<std::unique_ptr<TransferEngine>> engine = b.build();
  if (!engine.ok()) {
    say("error engine " + engine.status().to_string());
    return 2;
  }
  Result<std::unique_ptr<AllToAll>> made = AllToAll::create(c, **engine, device);
  if (!made.ok()) {
    say("error create " + made.status().to_string());
    return 2;
  }
  AllToAll& a2a = **made;
  std::fprintf(stderr, "[rank %u] %s", rank, a2a.buffers().describe(a2a.geometry()).c_str());
  say("info " + to_hex(a2a.local_info()));
  std::string line;
  if (!std::getline(std::cin, line) || line.rfind("infos ", 0) != 0) return 2;
  std::istringstream in(line.substr(6));
  std::vector<std::vector<uint8_t>> infos;
  for (std::string hex; in >> hex;) infos.push_back(*from_hex(hex));
  Status s = a2a.connect(infos);
  if (!s.ok()) {
    say("error connect " + s.to_string());
    return 2;
  }
  say("connected");

  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  GpuRank gpu(a2a, stream);
  s = gpu.allocate();
  const uint64_t seed = num("seed", 3);
  auto batches = [&](uint64_t step) {
    std::vector<TokenBatch> all(world);
    for (uint32_t r = 0; r < world; ++r) all[r] = make_tokens(c, seed, step, r * c.max_num_tokens, c.max_num_tokens);
    return all;
  };
  auto report = [&](uint64_t step, const Status& st, uint64_t digest) {
    if (st.ok()) {
      say("step " + std::to_string(step) + " ok " + std::to_string(digest));
    } else {
      say("step " + std::to_string(step) + " error " + std::string(error_code_name(st.code())) + " " + st.message());
    }
    return st.ok();
  };
  bool ok = s.ok();
  if (!ok) report(0, s, 0);
  if (ok && mode == "test") {
    for (uint64_t step = 1; ok && step <= num("steps", 4); ++step) {
      std::vector<TokenBatch> all = batches(step);
      uint64_t digest = 0;
      Status st = gpu.upload(all[rank]);
      if (st.ok()) st = gpu.issue_step();
      if (st.ok()) st = gpu.check(step, all, digest);
      ok = report(step, st, digest);
    }
  } else if (ok && mode == "graph") {
    // Steps 1..: step 1 runs eagerly (warm-up), then one step is captured and replayed; the
    // device's step counter advances inside the graph, the host never syncs inside a step.
    std::vector<TokenBatch> all = batches(1);
    uint64_t digest = 0;
    Status st = gpu.upload(all[rank]);
    if (st.ok()) st = gpu.issue_step();
    if (st.ok()) st = gpu.check(1, all, digest);
    ok = report(1, st, digest);
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    if (ok) {
      st = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess ? ok_status()
                                                                                           : internal_error("begin capture");
      if (st.ok()) st = gpu.issue_step();
      if (cudaStreamEndCapture(stream, &graph) != cudaSuccess && st.ok()) st = internal_error("end capture");
      if (st.ok() && cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) st = internal_error("instantiate");
      ok = st.ok() || report(2, st, 0);
    }
    for (uint64_t replay = 0; ok && replay < num("replays", 100); ++replay) {
      const uint64_t step = replay + 2;
      const bool checked = replay % 10 == 0 || replay + 1 == num("replays", 100);
      if (checked) {
        all = batches(step);
        st = gpu.upload(all[rank]);  // outside the graph: the same device buffers, new routing
        if (!st.ok()) break;
      }
      st = cudaGraphLaunch(exec, stream) == cudaSuccess ? ok_status() : internal_error("graph launch");
      if (st.ok() && checked) {
        st = gpu.check(step, all, digest);
        ok = report(step, st, digest);
      } else if (!st.ok()) {
        ok = report(step, st, 0);
      }
      if (st.ok() && !checked) st = gpu.sync();  // next replay's inputs may change: keep the host in step
    }
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
  } else if (ok && mode == "bench") {
    std::vector<TokenBatch> all = batches(1);
    Status st = gpu.upload(all[rank]);
    const uint64_t iterations = num("iterations", 50);
    cudaEvent_t ev[6];
    for (auto& e : ev) cudaEventCreate(&e);
    std::vector<double> t_dispatch, t_combine, t_dsend, t_drecv, t_csend, t_crecv;
    uint64_t digest = 0;
    const GpuClock clock = calibrate_gpu_clock();
    for (uint64_t i = 0; st.ok() && i < iterations; ++i) {
      st = gpu.issue_step_timed(ev);
      if (st.ok()) st = gpu.sync();
      if (st.ok() && i == 0) st = gpu.check(1, all, digest);  // the first step is verified
      float ms[5];
      for (int k = 0; k < 5; ++k) cudaEventElapsedTime(&ms[k], ev[k], ev[k + 1]);
      if (i >= 3) {  // warm-up
        t_dsend.push_back(ms[0] * 1e3);
        t_drecv.push_back(ms[1] * 1e3);
        t_dispatch.push_back((ms[0] + ms[1]) * 1e3);
        t_csend.push_back(ms[3] * 1e3);
        t_crecv.push_back(ms[4] * 1e3);
        t_combine.push_back((ms[3] + ms[4]) * 1e3);
      }
    }
    ok = report(1, st, digest);
    if (ok) {
      const std::string pre = "csv," + path + "," + shape + "," + std::to_string(world) + "," + std::to_string(rank) + ",";
      auto row = [&](const char* metric, const std::vector<double>& v) {
        char buf[160];
        std::snprintf(buf, sizeof buf, "%s,%.2f,%.2f,%zu", metric, pct(v, 50), pct(v, 99), v.size());
        say(pre + buf);
      };
      row("dispatch_us", t_dispatch);
      row("combine_us", t_combine);
      row("dispatch_send_us", t_dsend);
      row("dispatch_recv_us", t_drecv);
      row("combine_send_us", t_csend);
      row("combine_recv_us", t_crecv);
      if (c.path == Path::kProxy && world > 1) {
        // Reaction: the GPU's routes-ready store -> the route scatter's first WR handed to the
        // provider (GPU globaltimer mapped onto the CPU clock, plus the engine's own submit ->
        // first-post latency); posting: time inside submit calls per step.
        std::vector<uint32_t> lat = (*engine)->take_submit_latencies_ns();
        std::vector<ProxyStepTimes> times = a2a.take_proxy_times();
        std::vector<double> seen, submit, react, posting;
        const size_t submits_per_step = 4;
        for (size_t i = 3; i < times.size(); ++i) {
          const ProxyStepTimes& t = times[i];
          const double flag_cpu = static_cast<double>(t.routes_gpu_ns) + clock.offset_ns;
          const double first_post = i * submits_per_step < lat.size() ? lat[i * submits_per_step] : 0;
          seen.push_back((t.routes_seen_ns - flag_cpu) / 1e3);
          submit.push_back((t.routes_submit_ns - t.routes_seen_ns) / 1e3);
          react.push_back((t.routes_submit_ns - flag_cpu + first_post) / 1e3);
          posting.push_back(t.posting_ns / 1e3);
        }
        row("proxy_flag_to_seen_us", seen);
        row("proxy_seen_to_submit_us", submit);
        row("proxy_reaction_us", react);
        row("proxy_posting_per_step_us", posting);
        char buf[128];
        std::snprintf(buf, sizeof buf, "clock_offset_uncertainty_us,%.2f,%.2f,%d", clock.half_rtt_ns / 1e3,
                      clock.half_rtt_ns / 1e3, clock.samples);
        say(pre + buf);
      }
    }
  }
  if (ok) {
    s = a2a.finish(std::chrono::seconds(30));
    ok = s.ok() || report(0, s, 0);
  }
  if (ok) {
    say("done");
    while (std::getline(std::cin, line) && line != "exit") {
    }
  }
  made.value().reset();
  (*engine)->stop();
  cudaStreamDestroy(stream);
  return ok ? 0 : 3;
}

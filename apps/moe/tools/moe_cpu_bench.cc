// moe_cpu_bench: CPU ranks in one process (a thread and an engine each) over a real provider:
// step latency p50/p99 and the proxy's posting time and reaction per step, against a baseline
// measured in the same run — an imm ping-pong between two engines of the same provider (the
// least a step can cost is about two such round trips: routes, then tokens and combine).
//   moe_cpu_bench [provider=tcp] [world=2] [steps=200] [tokens=32] [hidden=512] [experts=16] [topk=4]
#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "fabric_lib/fabric_lib.h"
#include "fabric_lib/moe/all_to_all.h"

using namespace fabric_lib;
using namespace fabric_lib::moe;
using Clock = std::chrono::steady_clock;

namespace {

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p / 100.0 * (v.size() - 1) + 0.5))];
}

// Round trips of one imm between two engines: a -> b, b's expectation fires, b -> a.
std::vector<double> imm_round_trips(const std::string& provider, int n) {
  auto a = std::move(TransferEngineBuilder().provider(provider).build()).value();
  auto b = std::move(TransferEngineBuilder().provider(provider).build()).value();
  std::vector<uint8_t> ma(4096), mb(4096);
  MrRegistration ra = *a->register_memory(ma.data(), ma.size(), Access::kRemoteWrite);
  MrRegistration rb = *b->register_memory(mb.data(), mb.size(), Access::kRemoteWrite);
  CompletionCounter at_b, at_a;
  b->imms().expect_every(7, 1, RepeatingSink::callback([&](uint64_t, const Status& s) {
    if (s.ok()) b->submit_imm(8, ra.desc, Completion());
  }));
  a->imms().expect_every(8, 1, RepeatingSink::counter(at_a));
  std::vector<double> out;
  for (int i = 0; i < n; ++i) {
    const auto t0 = Clock::now();
    a->submit_imm(7, rb.desc, Completion());
    if (!at_a.wait_for(i + 1, std::chrono::seconds(5))) break;
    out.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  a->imms().release(8);
  b->imms().release(7);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    const size_t eq = s.find('=');
    if (eq != std::string::npos) a[s.substr(0, eq)] = s.substr(eq + 1);
  }
  auto num = [&](const char* k, uint64_t d) { return a.count(k) ? std::strtoull(a[k].c_str(), nullptr, 0) : d; };
  const std::string provider = a.count("provider") ? a["provider"] : "tcp";
  const uint32_t W = num("world", 2), steps = num("steps", 200);
  MoeConfig base;
  base.world_size = W;
  base.max_num_tokens = num("tokens", 32);
  base.num_experts = num("experts", 16);
  base.experts_per_token = num("topk", 4);
  base.hidden_dim = num("hidden", 512);
  base.in_dtype = DType::kBf16;
  base.out_dtype = DType::kBf16;

  const std::vector<double> rtt = imm_round_trips(provider, 300);
  std::vector<std::unique_ptr<TransferEngine>> engines;
  std::vector<std::unique_ptr<AllToAll>> ranks;
  std::vector<std::vector<uint8_t>> infos;
  for (uint32_t r = 0; r < W; ++r) {
    engines.push_back(std::move(TransferEngineBuilder().provider(provider).build()).value());
    MoeConfig c = base;
    c.rank = r;
    Result<std::unique_ptr<AllToAll>> x = AllToAll::create(c, *engines.back());
    if (!x.ok()) {
      std::fprintf(stderr, "%s\n", x.status().to_string().c_str());
      return 2;
    }
    infos.push_back((*x)->local_info());
    ranks.push_back(std::move(x).value());
  }
  for (auto& r : ranks) r->connect(infos);
  const Geometry g = ranks[0]->geometry();
  std::vector<std::vector<double>> step_us(W);
  std::barrier sync(W);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < W; ++r) {
    threads.emplace_back([&, r] {
      const uint32_t M = base.max_num_tokens, H = base.hidden_dim, K = base.experts_per_token;
      std::vector<uint16_t> x(size_t{M} * H, 0x3F80), out(size_t{M} * H), ox(size_t{g.max_recv_tokens} * H);
      std::vector<uint32_t> idx(size_t{M} * K);
      std::vector<float> w(size_t{M} * K, 1.0f / K);
      std::vector<int32_t> counts(g.local_experts);
      for (uint32_t t = 0; t < M; ++t) {
        for (uint32_t k = 0; k < K; ++k) idx[t * K + k] = (t * 7 + k * 3 + r) % base.num_experts;
      }
      for (uint32_t s = 0; s < steps; ++s) {
        sync.arrive_and_wait();
        const auto t0 = Clock::now();
        DispatchSendArgs ds{x.data(), H, nullptr, 0, 1, idx.data(), K, M, nullptr};
        DispatchRecvArgs dr{counts.data(), ox.data(), H, g.max_recv_tokens, nullptr, 0, 1};
        CombineSendArgs cs{ox.data(), H, g.max_recv_tokens};
        CombineRecvArgs cr{out.data(), H, w.data(), K, M, nullptr};
        Status st = ranks[r]->dispatch_send(ds);
        if (st.ok()) st = ranks[r]->dispatch_recv(dr);
        if (st.ok()) st = ranks[r]->combine_send(cs);
        if (st.ok()) st = ranks[r]->combine_recv(cr);
        if (!st.ok()) {
          std::fprintf(stderr, "rank %u: %s\n", r, st.to_string().c_str());
          std::exit(1);
        }
        step_us[r].push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      }
      ranks[r]->finish(std::chrono::seconds(10));
    });
  }
  for (auto& t : threads) t.join();
  std::vector<double> posting, reaction;
  for (const ProxyStepTimes& t : ranks[0]->take_proxy_times()) {
    posting.push_back(t.posting_ns / 1e3);
    reaction.push_back((t.routes_submit_ns - t.routes_seen_ns) / 1e3);
  }
  const double step50 = pct(step_us[0], 50), rtt50 = pct(rtt, 50);
  std::printf("provider %s, EP%u, M=%u H=%u E=%u K=%u, %u steps (rank 0):\n", provider.c_str(), W,
              base.max_num_tokens, base.hidden_dim, base.num_experts, base.experts_per_token, steps);
  std::printf("  baseline imm round trip         p50 %8.1f us  p99 %8.1f us\n", rtt50, pct(rtt, 99));
  std::printf("  step (dispatch + combine)       p50 %8.1f us  p99 %8.1f us  = %.2f x the round trip\n", step50,
              pct(step_us[0], 99), rtt50 > 0 ? step50 / rtt50 : 0.0);
  std::printf("  proxy posting time per step     p50 %8.1f us  p99 %8.1f us\n", pct(posting, 50), pct(posting, 99));
  std::printf("  proxy routes seen -> submit     p50 %8.1f us  p99 %8.1f us\n", pct(reaction, 50), pct(reaction, 99));
  for (auto& r : ranks) r.reset();
  for (auto& e : engines) e->stop();
  return 0;
}

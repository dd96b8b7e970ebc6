// engine-overhead-bench: the engine's own CPU work per WR, with the provider taken out.
//
// fabric-bench measures the engine against raw libfabric, so its "engine work per WR" carries the
// provider's noise (on shm most of a worker's time is inside libfabric). Here every domain the
// engine opens is wrapped (BuilderAccess::set_domain_decorator) in an InstantDomain: registration
// and peers go to the real provider, but a posted WRITE never reaches it — it completes at the
// next poll. What is left is the engine's path from submit to the completion counter: planning,
// the request slab, posting, WR records, events, metrics, delivery.
//
// Baseline, measured in the same run: the same InstantDomain driven directly (post_write + poll
// of the same number of WRs, no engine), so engine work per WR = (engine time - baseline time) /
// WRs. One thread submits and reaps with progress() (caller-thread posting; the worker idles).
// Prints ns per WR for single writes, 64-page paged writes, 4096-page paged writes (a KV layer's
// shape: requests scaled so the point posts as many WRs as the 64-page one) and 64-target scatters (with
// descriptors — to one peer, to 8 peers in turn, and to 64 descriptors of their own — and through
// a PeerGroup of one and of 8 peers), and MET/MISSED
// against the hot-path issue's target (engine work per WR <= 100 ns). Two more points run on a
// second engine of 4 one-medium domains (InstantDomain's ipc-like mode: a run of WRs completes as
// one event; its domains take a WR's imm count, as the ipc backend's do): a 256 KiB single write
// by the default route (one WR on domain 0 announcing its 4 shards' imms) and the same write
// pinned to domain 0 (one WR, one imm); and on a third engine whose one-medium domains do not take
// an imm count, the same write as its 4 shards' WRs on domain 0 — what the shards cost per request.
//
// Usage: engine-overhead-bench [--provider shm|tcp] [--requests N] [--window W] [--metrics false] [--quick]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "engine/builder_testing.h"
#include "support/instant_domain.h"
#include "fabric_lib/fabric_lib.h"
#include "transport/domain.h"

namespace fabric_lib {
namespace {

using Clock = std::chrono::steady_clock;

using testing::InstantDomain;

struct Options {
  std::string provider = "shm";
  uint64_t requests = 20000;
  uint64_t window = 16;
  uint32_t repeats = 3;  // alternating engine / baseline runs per point; the best of each counts
  std::string only;      // run only the points whose name contains this (profiling)
  bool metrics = true;   // the engine's latency histograms and per-peer metrics (the default: on)
};

struct Point {
  const char* name;
  uint64_t wrs_per_request;
  double engine_ns_per_wr = 0;
  double baseline_ns_per_wr = 0;
};

// The baseline: the same domain without the engine, `wrs` posts and polls in windows.
double baseline_ns_per_wr(uint64_t wrs, uint64_t window_wrs) {
  InstantDomain domain(nullptr);
  std::vector<transport::Event> events;
  transport::WriteWr wr;
  wr.length = 4096;
  const auto start = Clock::now();
  for (uint64_t posted = 0; posted < wrs;) {
    const uint64_t batch = std::min(window_wrs, wrs - posted);
    for (uint64_t i = 0; i < batch; ++i) {
      wr.context = posted + i;
      domain.post_write(wr, nullptr);
    }
    posted += batch;
    for (uint64_t got = 0; got < batch;) {
      events.clear();
      got += domain.poll(events, 64);
    }
  }
  return std::chrono::duration<double, std::nano>(Clock::now() - start).count() / static_cast<double>(wrs);
}

template <typename Submit>
Result<double> engine_ns_per_wr(TransferEngine& engine, const Options& o, uint64_t wrs_per_request, Submit submit) {
  CompletionCounter counter;
  uint64_t submitted = 0;
  // Runs until `requests` have finished in all; a stuck engine fails the run instead of hanging it.
  auto run = [&](uint64_t requests) -> Status {
    const auto give_up = Clock::now() + std::chrono::seconds(60);
    uint64_t loops = 0;
    while (counter.finished() < requests) {
      while (submitted < requests && submitted - counter.finished() < o.window) {
        Result<TransferId> id = submit(Completion::counter(counter));
        if (!id.ok()) return id.status();
        ++submitted;
      }
      engine.progress(256);
      if ((++loops & 1023) == 0 && Clock::now() > give_up) {  // rarely: the clock is not the engine's cost
        return Status(ErrorCode::kDeadlineExceeded, std::to_string(requests - counter.finished()) + " requests did not finish in 60 s");
      }
    }
    return ok_status();
  };
  FABRIC_LIB_RETURN_IF_ERROR(run(std::max<uint64_t>(1, o.requests / 10)));  // warm-up: slabs, peers
  const uint64_t warm = counter.finished();
  const auto start = Clock::now();
  FABRIC_LIB_RETURN_IF_ERROR(run(warm + o.requests));
  const double ns = std::chrono::duration<double, std::nano>(Clock::now() - start).count();
  if (counter.errors.load() != 0) return internal_error(std::to_string(counter.errors.load()) + " requests failed");
  return ns / static_cast<double>(o.requests * wrs_per_request);
}

int run(const Options& o) {
  TransferEngineBuilder builder;
  builder.provider(o.provider).domains_per_group(1).metrics(o.metrics);
  BuilderAccess::set_domain_decorator(
      builder, [](std::unique_ptr<transport::Domain> inner) { return std::make_unique<InstantDomain>(std::move(inner)); });
  Result<std::unique_ptr<TransferEngine>> built = builder.build();
  if (!built.ok()) {
    std::fprintf(stderr, "engine-overhead-bench: %s\n", built.status().to_string().c_str());
    return 1;
  }
  TransferEngine& engine = **built;
  constexpr size_t kRegion = 1 << 20;
  constexpr uint32_t kPages = 64, kLayerPages = 4096, kPage = 4096;
  std::vector<uint8_t> src(size_t{kLayerPages} * kPage, 1), dst(size_t{kLayerPages} * kPage, 0);
  Result<MrRegistration> s = engine.register_memory(src.data(), src.size(), Access::kLocalOnly);
  Result<MrRegistration> d = engine.register_memory(dst.data(), dst.size(), Access::kRemoteWrite);
  if (!s.ok() || !d.ok()) {
    std::fprintf(stderr, "engine-overhead-bench: register_memory: %s\n", (s.ok() ? d.status() : s.status()).to_string().c_str());
    return 1;
  }
  PagedWriteRequest paged{s->handle, d->desc, kPage};
  ScatterRequest scatter{s->handle};
  for (uint32_t i = 0; i < kPages; ++i) {
    paged.src_pages.push_back(i);
    paged.dst_pages.push_back(kPages - 1 - i);
    scatter.targets.push_back({kPage, uint64_t{i} * kPage, uint64_t{i} * kPage, d->desc, 0});
  }
  paged.src_stride = paged.dst_stride = kPage;
  paged.imm = scatter.imm = 7;
  PagedWriteRequest layer = paged;
  layer.src_pages.clear();
  layer.dst_pages.clear();
  for (uint32_t i = 0; i < kLayerPages; ++i) {
    layer.src_pages.push_back(i);
    layer.dst_pages.push_back(kLayerPages - 1 - i);
  }
  // The same scatter through a PeerGroup (the form MoE dispatch uses): targets name a group
  // member instead of carrying a descriptor each.
  const MrDesc group_descs[] = {d->desc};
  Result<PeerGroup> group = engine.add_peer_group(group_descs);
  if (!group.ok()) {
    std::fprintf(stderr, "engine-overhead-bench: add_peer_group: %s\n", group.status().to_string().c_str());
    return 1;
  }
  ScatterRequest grouped = scatter;
  grouped.group = &*group;
  for (ScatterTarget& t : grouped.targets) t.dst = MrDesc{};
  // The same scatter to 8 peers, the targets taking turns (as MoE dispatch names its peers): each
  // target's peer differs from the one before. The peers are the 8 groups of a second engine
  // (real addresses for the provider's address vector; the WRITEs never reach them).
  constexpr size_t kPeers = 8;
  Result<std::unique_ptr<TransferEngine>> peer_engine =
      TransferEngineBuilder().provider(o.provider).domains_per_group(1).groups(kPeers).build();
  if (!peer_engine.ok()) {
    std::fprintf(stderr, "engine-overhead-bench: peer engine: %s\n", peer_engine.status().to_string().c_str());
    return 1;
  }
  std::vector<std::vector<uint8_t>> peer_regions(kPeers, std::vector<uint8_t>(kRegion, 0));
  ScatterRequest to_peers = scatter;
  std::vector<MrDesc> peer_descs;
  for (size_t g = 0; g < kPeers; ++g) {
    Result<MrRegistration> r =
        (*peer_engine)->register_memory(peer_regions[g].data(), kRegion, Access::kRemoteWrite, MemoryKind::kHost, g);
    if (!r.ok()) {
      std::fprintf(stderr, "engine-overhead-bench: peer register_memory: %s\n", r.status().to_string().c_str());
      return 1;
    }
    for (size_t i = g; i < kPages; i += kPeers) to_peers.targets[i].dst = r->desc;
    peer_descs.push_back(r->desc);
  }
  // And with a descriptor of its own per target (decoded copies: equal, another identity), as
  // fabric-bench's 64-peer scatter names 64: no two targets share an entry of the request.
  ScatterRequest to_descs = to_peers;
  for (size_t i = 0; i < kPages; ++i) to_descs.targets[i].dst = MrDesc::from_bytes(peer_descs[i % kPeers].to_bytes()).value();
  // And through a PeerGroup of those 8 peers, taking turns the same way. (The group scatter
  // above names one member: its WRs all go to one peer and are posted as one run.)
  Result<PeerGroup> peer_group = engine.add_peer_group(peer_descs);
  if (!peer_group.ok()) {
    std::fprintf(stderr, "engine-overhead-bench: add_peer_group: %s\n", peer_group.status().to_string().c_str());
    return 1;
  }
  ScatterRequest grouped_to_peers = grouped;
  grouped_to_peers.group = &*peer_group;
  for (size_t i = 0; i < kPages; ++i) grouped_to_peers.targets[i].peer = static_cast<uint32_t>(i % kPeers);
  const WriteRequest single{s->handle, 0, d->desc, 0, kPage, 7};
  // The one-medium engines: 4 domains, each an InstantDomain that says one_medium (and, for
  // `medium`, takes_imm_count), and a 256 KiB write on each.
  struct Medium {
    std::unique_ptr<TransferEngine> engine;
    WriteRequest write;
  };
  constexpr uint64_t kShardedBytes = 256 * 1024;
  auto make_medium = [&](bool takes_imm_count) -> Result<Medium> {
    TransferEngineBuilder builder;
    builder.provider(o.provider).domains_per_group(4).metrics(o.metrics);
    BuilderAccess::set_domain_decorator(builder, [takes_imm_count](std::unique_ptr<transport::Domain> inner) {
      return std::make_unique<InstantDomain>(std::move(inner), /*one_medium=*/true, takes_imm_count);
    });
    Result<std::unique_ptr<TransferEngine>> e = builder.build();
    if (!e.ok()) return e.status();
    Result<MrRegistration> ms = (*e)->register_memory(src.data(), kShardedBytes, Access::kLocalOnly);
    if (!ms.ok()) return ms.status();
    Result<MrRegistration> md = (*e)->register_memory(dst.data(), kShardedBytes, Access::kRemoteWrite);
    if (!md.ok()) return md.status();
    return Medium{std::move(e).value(), WriteRequest{ms->handle, 0, md->desc, 0, kShardedBytes, 7}};
  };
  Result<Medium> medium = make_medium(true);
  Result<Medium> medium_wrs = make_medium(false);
  if (!medium.ok() || !medium_wrs.ok()) {
    std::fprintf(stderr, "engine-overhead-bench: one-medium engine: %s\n",
                 (medium.ok() ? medium_wrs.status() : medium.status()).to_string().c_str());
    return 1;
  }
  WriteRequest pinned = medium->write;
  pinned.route = Pinned{0};
  const uint64_t shards = imm_count_of(medium->write, 4);

  std::vector<Point> points = {{"single 4 KiB", 1},
                               {"paged 64 x 4 KiB", kPages},
                               {"paged 4096 x 4 KiB", kLayerPages},
                               {"scatter 64 x 4 KiB", kPages},
                               {"scatter 64 x 4 KiB to 8 peers", kPages},
                               {"scatter 64 x 4 KiB to 64 descriptors", kPages},
                               {"group scatter 64 x 4 KiB", kPages},
                               {"group scatter 64 x 4 KiB to 8 peers", kPages},
                               {"one medium: 256 KiB default", shards},
                               {"one medium: 256 KiB as 4 shards", shards},
                               {"one medium: 256 KiB pinned", 1}};
  // A name given whole selects that point alone ("scatter 64 x 4 KiB" is also part of two others).
  const bool exact = std::any_of(points.begin(), points.end(), [&](const Point& p) { return o.only == p.name; });
  std::erase_if(points, [&](const Point& p) {
    return exact ? o.only != p.name : std::string(p.name).find(o.only) == std::string::npos;
  });
  if (points.empty()) {
    std::fprintf(stderr, "engine-overhead-bench: no point matches --only '%s'\n", o.only.c_str());
    return 2;
  }
  for (uint32_t round = 0; round < o.repeats; ++round) {
  for (Point& p : points) {
    // The 4096-page point posts as many WRs as the 64-page ones: 1/64 of the requests.
    Options po = o;
    if (p.wrs_per_request > kPages) po.requests = std::max<uint64_t>(1, o.requests * kPages / p.wrs_per_request);
    TransferEngine& one = *medium->engine;
    TransferEngine& one_wrs = *medium_wrs->engine;
    Result<double> ns = std::string(p.name).ends_with("default")
                            ? engine_ns_per_wr(one, o, shards, [&](Completion c) { return one.submit_write(medium->write, c); })
                        : std::string(p.name).ends_with("shards")
                            ? engine_ns_per_wr(one_wrs, o, shards, [&](Completion c) { return one_wrs.submit_write(medium_wrs->write, c); })
                        : std::string(p.name).ends_with("pinned")
                            ? engine_ns_per_wr(one, o, 1, [&](Completion c) { return one.submit_write(pinned, c); })
                        : std::string(p.name).starts_with("single")
                            ? engine_ns_per_wr(engine, o, 1, [&](Completion c) { return engine.submit_write(single, c); })
                        : std::string(p.name) == "paged 4096 x 4 KiB"
                            ? engine_ns_per_wr(engine, po, kLayerPages, [&](Completion c) { return engine.submit_paged_writes(layer, c); })
                        : std::string(p.name).starts_with("paged")
                            ? engine_ns_per_wr(engine, o, kPages, [&](Completion c) { return engine.submit_paged_writes(paged, c); })
                        : std::string(p.name).ends_with("descriptors")
                            ? engine_ns_per_wr(engine, o, kPages, [&](Completion c) { return engine.submit_scatter(to_descs, c); })
                        : std::string(p.name) == "group scatter 64 x 4 KiB to 8 peers"
                            ? engine_ns_per_wr(engine, o, kPages, [&](Completion c) { return engine.submit_scatter(grouped_to_peers, c); })
                        : std::string(p.name).ends_with("peers")
                            ? engine_ns_per_wr(engine, o, kPages, [&](Completion c) { return engine.submit_scatter(to_peers, c); })
                        : std::string(p.name).starts_with("scatter")
                            ? engine_ns_per_wr(engine, o, kPages, [&](Completion c) { return engine.submit_scatter(scatter, c); })
                            : engine_ns_per_wr(engine, o, kPages, [&](Completion c) { return engine.submit_scatter(grouped, c); });
    if (!ns.ok()) {
      std::fprintf(stderr, "engine-overhead-bench: %s: %s\n", p.name, ns.status().to_string().c_str());
      return 1;
    }
    p.engine_ns_per_wr = std::min(p.engine_ns_per_wr == 0 ? *ns : p.engine_ns_per_wr, *ns);
    const double base = baseline_ns_per_wr(po.requests * p.wrs_per_request, o.window * p.wrs_per_request);
    p.baseline_ns_per_wr = p.baseline_ns_per_wr == 0 ? base : std::min(p.baseline_ns_per_wr, base);
  }
  }
  std::printf("engine-overhead-bench: provider %s (registration and peers only; WRITEs complete in an instant domain), "
              "%llu requests, window %llu, best of %u runs, one thread submitting and reaping with progress()\n",
              o.provider.c_str(), static_cast<unsigned long long>(o.requests), static_cast<unsigned long long>(o.window),
              o.repeats);
  std::printf("%-32s %14s %16s %18s\n", "request", "engine ns/WR", "baseline ns/WR", "engine work ns/WR");
  for (const Point& p : points) {
    std::printf("%-32s %14.1f %16.1f %18.1f\n", p.name, p.engine_ns_per_wr, p.baseline_ns_per_wr,
                p.engine_ns_per_wr - p.baseline_ns_per_wr);
  }
  // Per request, the one-medium points side by side (engine time, baseline included).
  const auto at = [&](const char* name) { return std::find_if(points.begin(), points.end(), [&](const Point& p) { return std::string(p.name) == name; }); };
  const auto request_ns = [&](auto p) { return p == points.end() ? -1.0 : p->engine_ns_per_wr * static_cast<double>(p->wrs_per_request); };
  if (auto d = at("one medium: 256 KiB default"), a = at("one medium: 256 KiB as 4 shards"), b = at("one medium: 256 KiB pinned");
      d != points.end() || a != points.end() || b != points.end()) {
    std::printf("one medium, per request (-1: not run): default (1 WR, 4 imms) %.1f ns, 4 shards as WRs %.1f ns, pinned (1 WR) %.1f ns\n",
                request_ns(d), request_ns(a), request_ns(b));
  }
  std::printf("\nTargets (engine work per WR = engine - baseline, measured in this run):\n");
  for (const Point& p : points) {
    const double work = p.engine_ns_per_wr - p.baseline_ns_per_wr;
    std::printf("  %s: engine work per WR %.1f ns (<= 100 ns): %s\n", p.name, work, work <= 100 ? "MET" : "MISSED");
  }
  return 0;
}

}  // namespace
}  // namespace fabric_lib

int main(int argc, char** argv) {
  fabric_lib::Options o;
  CLI::App app{"engine-overhead-bench: the engine's CPU work per WR, the provider taken out"};
  app.add_option("--provider", o.provider, "provider for registration and peers (writes never reach it)");
  app.add_option("--requests", o.requests, "requests per timed run")->check(CLI::PositiveNumber);
  app.add_option("--window", o.window, "requests in flight")->check(CLI::PositiveNumber);
  app.add_option("--repeats", o.repeats, "runs per point (engine and baseline alternate); the best counts")
      ->check(CLI::Range(1, 100));
  app.add_option("--only", o.only, "run only the point of this name, or those whose name contains it (for profiling)");
  bool quick = false;
  app.add_option("--metrics", o.metrics, "the engine's latency histograms and per-peer metrics (on by default; off shows their share)");
  app.add_flag("--quick", quick, "500 requests per run (smoke test)");
  CLI11_PARSE(app, argc, argv);
  if (quick) {
    o.requests = 500;
    o.repeats = 1;
  }
  return fabric_lib::run(o);
}

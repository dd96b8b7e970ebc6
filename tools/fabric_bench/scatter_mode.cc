// scatter: one request to P peers (P engines in the target process), by peer, through a
// pre-resolved PeerGroup. Posting time = API call until every WR of the request was handed to the
// provider, on the poster's clock (the engine's record, TransferEngine::take_posting_times_ns;
// scatter-post-observed: the same seen by a thread spinning on stats().wrs_posted, the former
// measure); completion time = API call until its completion. The raw baseline in the same run: a plain loop of fi_writedata, one
// per peer into the same P engines' regions, timed the same way (scatter-post-raw,
// scatter-complete-raw).
#include <chrono>
#include <cstdio>

#include "common/pattern.h"
#include "fabric_bench/modes.h"
#include "fabric_bench/stats.h"

namespace fabric_lib::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kWarmup = 10;

std::string us_text(const std::optional<LatencySummary>& s) {
  char buf[96];
  std::snprintf(buf, sizeof(buf), "p50 %.2f us, p99 %.2f us", s ? s->p50 : 0.0, s ? s->p99 : 0.0);
  return buf;
}

}  // namespace

Status run_scatter_mode(Initiator& init, std::vector<Row>& rows) {
  const BenchOptions& o = init.options();
  const size_t domains = init.config().domains;
  const uint64_t bytes = o.scatter_bytes;
  size_t max_peers = 0;
  for (size_t p : o.scatter_peers) max_peers = std::max(max_peers, p);
  if (max_peers == 0) return ok_status();
  AlignedBuffer src(max_peers * bytes);  // before the engine, so it outlives every write from it
  Result<std::unique_ptr<TransferEngine>> built = init.build_latency_engine();
  if (!built.ok()) return built.status();
  TransferEngine& engine = **built;

  Result<std::vector<std::string>> reply =
      init.peer().call("peers " + std::to_string(max_peers) + " " + std::to_string(bytes), std::chrono::minutes(5));
  if (!reply.ok()) return reply.status();
  if (reply->size() != max_peers) return malformed("peers reply has " + std::to_string(reply->size()) + " descriptors");
  std::vector<MrDesc> descs;
  for (const std::string& hex : *reply) {
    Result<MrDesc> d = MrDesc::from_hex(hex);
    if (!d.ok()) return d.status();
    descs.push_back(*d);
  }
  tools::fill_pattern(src.data(), src.size(), o.seed);
  Result<MrRegistration> mr = engine.register_memory(src.data(), src.size(), Access::kLocalOnly);
  if (!mr.ok()) return mr.status();
  Result<RawRemoteRegion> raw_src = init.raw().register_region(src.data(), src.size(), false);
  if (!raw_src.ok()) return raw_src.status();
  // The raw loop writes into the peers' engine regions: their descriptors name, per domain, the
  // endpoint address, key and base a raw fi_writedata needs.
  std::vector<RawRemoteRegion> raw_peers;
  for (const MrDesc& d : descs) {
    RawRemoteRegion r;
    for (size_t k = 0; k < d.num_domains(); ++k) r.push_back({d.domain(k).address.bytes(), d.domain(k).rkey, d.domain(k).addr_base});
    raw_peers.push_back(std::move(r));
  }

  for (size_t peers : o.scatter_peers) {
    Result<PeerGroup> group = engine.add_peer_group(std::span<const MrDesc>(descs.data(), peers));
    if (!group.ok()) return group.status();
    ScatterRequest proto;
    proto.src = mr->handle;
    proto.sharding = ScatterSharding::kByPeer;
    proto.group = &*group;
    for (size_t t = 0; t < peers; ++t) proto.targets.push_back({bytes, t * bytes, 0, MrDesc(), static_cast<uint32_t>(t)});
    std::vector<uint64_t> imms_of(peers);
    uint64_t wrs = 0;  // every WR carries the imm, so WRs = imms delivered
    proto.imm = 1;  // for imm_count_of; every submitted copy gets its own imm
    for (size_t t = 0; t < peers; ++t) wrs += imms_of[t] = imm_count_of(proto, t, domains);

    // Verification: one scatter onto cleared regions; every peer checks its bytes.
    reply = init.peer().call("peer_clear " + std::to_string(peers) + " " + std::to_string(bytes));
    if (!reply.ok()) return reply.status();
    uint32_t imm = init.next_imm();
    {
      ScatterRequest r = proto;
      r.imm = imm;
      CompletionCounter done;
      Result<TransferId> id = engine.submit_scatter(std::move(r), Completion::counter(done));
      if (!id.ok()) return id.status();
      if (!done.wait_for(1, kModeTimeout) || done.errors.load() != 0) return Status(ErrorCode::kProviderError, "verification scatter failed");
    }
    for (size_t t = 0; t < peers; ++t) {
      reply = init.peer().call("peer_check " + std::to_string(t) + " " + std::to_string(imm) + " " +
                               std::to_string(imms_of[t]) + " " + std::to_string(bytes) + " " +
                               std::to_string(hash_region(src.data() + t * bytes, bytes)));
      if (!reply.ok()) return Status(reply.status().code(), "scatter to " + std::to_string(peers) + " peers, peer " + std::to_string(t) + ": " + reply.status().message());
    }
    init.note_verified();

    // Timed: one scatter at a time, in two passes. Pass 0 ("observed"): this thread spins on
    // stats().wrs_posted until every WR is posted, as fabric-bench measured posting before
    // 2026-12-02 — a reader, on another core, of the counters the posting thread writes per WR,
    // which may slow what it measures. Pass 1: this thread only waits for the completion, and the
    // posting time is the engine's own record (take_posting_times_ns: submit call to last WR
    // handed to the provider, on the posting thread's clock), as the raw loop's is its own.
    imm = init.next_imm();
    const size_t total = kWarmup + o.latency_iterations;
    std::vector<double> observed_us, done_us;
    std::vector<uint32_t> posting_ns, first_ns;
    for (int pass = 0; pass < 2; ++pass) {
      if (pass == 1) {  // drop the verification's and the observed pass's samples
        engine.take_posting_times_ns();
        engine.take_submit_latencies_ns();
      }
      for (size_t i = 0; i < total; ++i) {
        ScatterRequest r = proto;
        r.imm = imm;
        CompletionCounter done;
        const uint64_t base = pass == 0 ? engine.stats().wrs_posted : 0;
        const auto t0 = Clock::now();
        Result<TransferId> id = engine.submit_scatter(std::move(r), Completion::counter(done));
        if (!id.ok()) return id.status();
        // Tight loop (no yield): the worker runs on another core, and a yield would add its
        // time slice to the measurement.
        for (uint64_t n = 0; pass == 0 && engine.stats().wrs_posted < base + wrs; ++n) {
          if (done.finished() > 0) break;  // failed before posting everything
          if ((n & 4095) == 4095 && Clock::now() - t0 > kModeTimeout) {
            return Status(ErrorCode::kDeadlineExceeded, "scatter WRs were never posted");
          }
        }
        const auto t1 = Clock::now();
        uint32_t spins = 0;
        while (done.finished() < 1) {
          if (Clock::now() - t0 > kModeTimeout) return Status(ErrorCode::kDeadlineExceeded, "scatter did not complete");
          relax(spins);
        }
        const auto t2 = Clock::now();
        if (done.errors.load() != 0) return Status(ErrorCode::kProviderError, "a scatter failed");
        if (i < kWarmup) continue;
        if (pass == 0) observed_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        if (pass == 1) done_us.push_back(std::chrono::duration<double, std::micro>(t2 - t0).count());
      }
    }
    for (size_t t = 0; t < peers; ++t) {  // both passes' imms
      reply = init.peer().call("peer_check " + std::to_string(t) + " " + std::to_string(imm) + " " +
                               std::to_string(imms_of[t] * 2 * total) + " 0 -");
      if (!reply.ok()) return reply.status();
    }
    posting_ns = engine.take_posting_times_ns();
    first_ns = engine.take_submit_latencies_ns();
    auto after_warmup_ns = [](const std::vector<uint32_t>& v) {
      return std::span<const uint32_t>(v).subspan(std::min(v.size(), kWarmup));
    };
    if (posting_ns.size() != total) {
      return Status(ErrorCode::kInternal, "the engine recorded " + std::to_string(posting_ns.size()) +
                                              " posting times for " + std::to_string(total) + " scatters");
    }
    const std::optional<LatencySummary> post = summarize_ns_as_us(after_warmup_ns(posting_ns));
    const std::optional<LatencySummary> observed = summarize(observed_us), complete = summarize(done_us);
    // The raw loop, same peers, same bytes, one imm per peer.
    const uint32_t raw_imm = init.next_imm();
    std::vector<double> raw_done_us;
    Result<std::vector<double>> raw_post_us =
        init.raw().scatter(std::vector<RawRemoteRegion>(raw_peers.begin(), raw_peers.begin() + static_cast<std::ptrdiff_t>(peers)),
                           bytes, total, raw_imm, &raw_done_us);
    if (!raw_post_us.ok()) return raw_post_us.status();
    for (size_t t = 0; t < peers; ++t) {
      reply = init.peer().call("peer_check " + std::to_string(t) + " " + std::to_string(raw_imm) + " " +
                               std::to_string(total) + " 0 -");
      if (!reply.ok()) return Status(reply.status().code(), "raw scatter, peer " + std::to_string(t) + ": " + reply.status().message());
    }
    auto after_warmup = [](const std::vector<double>& v) {
      return std::vector<double>(v.begin() + static_cast<std::ptrdiff_t>(std::min(kWarmup, v.size())), v.end());
    };
    const std::optional<LatencySummary> raw_post = summarize(after_warmup(*raw_post_us));
    const std::optional<LatencySummary> raw_complete = summarize(after_warmup(raw_done_us));
    // The engine's own clock of the first WR (pass 1).
    const std::optional<LatencySummary> first = summarize_ns_as_us(after_warmup_ns(first_ns));
    auto add_row = [&](const char* mode, const std::optional<LatencySummary>& l) {
      Row row = init.row(mode, peers);
      if (l) row.p50_us = l->p50, row.p99_us = l->p99;
      rows.push_back(row);
    };
    add_row("scatter-post", post);
    add_row("scatter-post-observed", observed);
    add_row("scatter-complete", complete);
    add_row("scatter-post-raw", raw_post);
    add_row("scatter-complete-raw", raw_complete);
    init.progress().step(init.provider() + " scatter to " + std::to_string(peers) + " peers (" + format_size(bytes) +
                         " each): post " + us_text(post) + " (observed through stats(): " + us_text(observed) +
                         "); complete " + us_text(complete) +
                         "; first WR posted " + us_text(first) + "; raw loop: post " + us_text(raw_post) +
                         ", complete " + us_text(raw_complete));
  }
  engine.unregister_memory(mr->handle);
  engine.stop();
  return ok_status();
}

}  // namespace fabric_lib::bench

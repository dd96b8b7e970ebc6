// prepared: what a submit call costs the caller, plain against prepared (TransferEngine::
// prepare_paged_writes / prepare_scatter), for the same request in the same run: a paged write of
// --pages-per-request 4 KiB pages, and a scatter of --scatter-bytes to each of --scatter-peers
// peers (the plain scatter through a PeerGroup, its fastest form).
//
// The forms alternate in bursts of back-to-back submits (each burst's completions are awaited
// before the next), and only the call is timed, by the caller's own clock (steady_clock); the
// rows and the verdict use its p50. The first call of a burst wakes the worker, and on a crowded
// machine the woken worker may preempt the caller: that shows in the p99, not in the p50. The
// progress line adds the calling thread's CPU time per call (which also holds the cost of
// reading that clock). The plain request is built before the clock starts (as an application
// builds it before calling), so the comparison is conservative for prepared.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <numeric>

#include "common/pattern.h"
#include "fabric_bench/modes.h"
#include "fabric_bench/stats.h"

namespace fabric_lib::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kPage = 4096;
constexpr size_t kBursts = 10;  // timed bursts per form, alternating, after one untimed burst each

double thread_cpu_us() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

// Per submit call: the caller's wall time and CPU time, in microseconds.
struct CallTimes {
  std::vector<double> wall_us, cpu_us;
};

// `n` back-to-back submits, then their completions (every one must succeed). `build` runs before
// each call's clocks start; `submit(done)` is the timed call.
template <typename Build, typename Submit>
Status burst(size_t n, CallTimes* times, const char* what, Build&& build, Submit&& submit) {
  CompletionCounter done;
  for (size_t i = 0; i < n; ++i) {
    build();
    const double c0 = thread_cpu_us();
    const auto t0 = Clock::now();
    Result<TransferId> id = submit(Completion::counter(done));
    const auto t1 = Clock::now();
    const double c1 = thread_cpu_us();
    if (!id.ok()) return id.status();
    if (times) {
      times->wall_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      times->cpu_us.push_back(c1 - c0);
    }
  }
  if (!done.wait_for(n, std::chrono::duration_cast<std::chrono::milliseconds>(kModeTimeout))) {
    return Status(ErrorCode::kDeadlineExceeded, std::string(what) + ": a burst did not complete");
  }
  if (done.errors.load() != 0) return Status(ErrorCode::kProviderError, std::string(what) + " failed");
  return ok_status();
}

// One untimed burst of each form, then kBursts timed ones each, alternating. Returns the number
// of submits of each form.
template <typename Plain, typename Prepared>
Result<size_t> alternate(const BenchOptions& o, Plain&& plain, Prepared&& prepared, CallTimes& plain_t,
                         CallTimes& prep_t) {
  const size_t per_burst = std::max<size_t>(1, o.latency_iterations / kBursts);
  FABRIC_LIB_RETURN_IF_ERROR(plain(per_burst, nullptr));
  FABRIC_LIB_RETURN_IF_ERROR(prepared(per_burst, nullptr));
  for (size_t b = 0; b < kBursts; ++b) {
    FABRIC_LIB_RETURN_IF_ERROR(plain(per_burst, &plain_t));
    FABRIC_LIB_RETURN_IF_ERROR(prepared(per_burst, &prep_t));
  }
  return per_burst * (kBursts + 1);
}

// The plain and prepared rows of one comparison (p50/p99: the call's wall time); the prepared row's
// ratio is plain p50 / prepared p50 (above 1: the prepared call is cheaper).
void add_rows(Initiator& init, std::vector<Row>& rows, const std::string& what, uint64_t size, const CallTimes& plain,
              const CallTimes& prepared) {
  const std::optional<LatencySummary> p = summarize(plain.wall_us), q = summarize(prepared.wall_us);
  Row a = init.row("plain-" + what, size);
  if (p) a.p50_us = p->p50, a.p99_us = p->p99;
  rows.push_back(a);
  Row b = init.row("prepared-" + what, size);
  if (q) b.p50_us = q->p50, b.p99_us = q->p99;
  if (p && q && q->p50 > 0) b.ratio = p->p50 / q->p50;
  rows.push_back(b);
}

std::string compare_text(const CallTimes& plain, const CallTimes& prepared) {
  const std::optional<LatencySummary> pc = summarize(plain.cpu_us), qc = summarize(prepared.cpu_us);
  const std::optional<LatencySummary> pw = summarize(plain.wall_us), qw = summarize(prepared.wall_us);
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "call p50 plain %.2f us / prepared %.2f us (p99 %.2f / %.2f); thread CPU p50 %.2f / %.2f us (%zu calls each)",
                pw ? pw->p50 : 0.0, qw ? qw->p50 : 0.0, pw ? pw->p99 : 0.0, qw ? qw->p99 : 0.0, pc ? pc->p50 : 0.0,
                qc ? qc->p50 : 0.0, pw ? pw->count : size_t{0});
  return buf;
}

Status run_paged(Initiator& init, TransferEngine& engine, AlignedBuffer& src, std::vector<Row>& rows) {
  const BenchOptions& o = init.options();
  const uint32_t pages = static_cast<uint32_t>(o.pages_per_request);
  const uint64_t bytes = uint64_t{pages} * kPage;
  tools::fill_pattern(src.data(), bytes, o.seed + 7);
  Result<std::vector<std::string>> reply = init.peer().call("region " + std::to_string(bytes));
  if (!reply.ok()) return reply.status();
  if (reply->empty()) return malformed("empty region reply");
  Result<MrDesc> dst = MrDesc::from_hex((*reply)[0]);
  if (!dst.ok()) return dst.status();
  Result<MrRegistration> mr = engine.register_memory(src.data(), bytes, Access::kLocalOnly);
  if (!mr.ok()) return mr.status();

  // Reversed pages: both forms write every page once, elsewhere than its source index.
  std::vector<uint32_t> src_pages(pages), dst_pages(pages);
  std::iota(src_pages.begin(), src_pages.end(), 0);
  for (uint32_t i = 0; i < pages; ++i) dst_pages[i] = pages - 1 - i;
  std::vector<uint8_t> expected(bytes);
  for (uint32_t i = 0; i < pages; ++i) std::memcpy(expected.data() + dst_pages[i] * kPage, src.data() + i * kPage, kPage);
  const uint64_t want_hash = hash_region(expected.data(), bytes);
  const PagedWriteRequest proto{mr->handle, *dst, kPage, src_pages, dst_pages, kPage, kPage, 0, 0, std::nullopt};
  Result<PreparedPagedWrites> prepared =
      engine.prepare_paged_writes({mr->handle, *dst, kPage, kPage, kPage, 0, 0, pages, pages});
  if (!prepared.ok()) return prepared.status();

  uint32_t imm = 0;
  PagedWriteRequest r;
  auto plain = [&](size_t n, CallTimes* times) {
    return burst(
        n, times, "plain paged write",
        [&] {
          r = proto;
          r.imm = imm;
        },
        [&](Completion done) { return engine.submit_paged_writes(std::move(r), std::move(done)); });
  };
  auto prep = [&](size_t n, CallTimes* times) {
    return burst(
        n, times, "prepared paged write", [] {},
        [&](Completion done) { return engine.submit_prepared(*prepared, src_pages, dst_pages, imm, std::move(done)); });
  };
  // Verification of each form onto a cleared region.
  for (int form = 0; form < 2; ++form) {
    reply = init.peer().call("clear " + std::to_string(bytes));
    if (!reply.ok()) return reply.status();
    imm = init.next_imm();
    FABRIC_LIB_RETURN_IF_ERROR(form == 0 ? plain(1, nullptr) : prep(1, nullptr));
    reply = init.peer().call("check " + std::to_string(imm) + " " + std::to_string(pages) + " " + std::to_string(bytes) +
                             " " + std::to_string(want_hash));
    if (!reply.ok()) {
      return Status(reply.status().code(),
                    std::string(form ? "prepared" : "plain") + " paged write: " + reply.status().message());
    }
    init.note_verified();
  }
  // Timed: both forms write the same pages with one imm; the target counts all of them.
  imm = init.next_imm();
  CallTimes plain_t, prep_t;
  Result<size_t> submits = alternate(o, plain, prep, plain_t, prep_t);
  if (!submits.ok()) return submits.status();
  reply = init.peer().call("wait " + std::to_string(imm) + " " + std::to_string(2 * *submits * pages));
  if (!reply.ok()) return reply.status();
  add_rows(init, rows, "paged", pages, plain_t, prep_t);
  init.progress().step(init.provider() + " submit call, paged write of " + std::to_string(pages) + " pages: " +
                       compare_text(plain_t, prep_t));
  engine.unregister_memory(mr->handle);
  return ok_status();
}

size_t max_peers_of(const BenchOptions& o) {
  size_t max_peers = 0;
  for (size_t p : o.scatter_peers) max_peers = std::max(max_peers, p);
  return max_peers;
}

Status run_scatter(Initiator& init, TransferEngine& engine, AlignedBuffer& src, std::vector<Row>& rows) {
  const BenchOptions& o = init.options();
  const size_t domains = init.config().domains;
  const uint64_t bytes = o.scatter_bytes;
  const size_t max_peers = max_peers_of(o);
  if (max_peers == 0) return ok_status();
  tools::fill_pattern(src.data(), src.size(), o.seed + 11);
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
  Result<MrRegistration> mr = engine.register_memory(src.data(), src.size(), Access::kLocalOnly);
  if (!mr.ok()) return mr.status();

  for (size_t peers : o.scatter_peers) {
    Result<PeerGroup> group = engine.add_peer_group(std::span<const MrDesc>(descs.data(), peers));
    if (!group.ok()) return group.status();
    ScatterRequest proto;
    proto.src = mr->handle;
    proto.group = &*group;
    ScatterTemplate t;
    t.src = mr->handle;
    t.group = &*group;
    std::vector<ScatterSlice> slices;
    for (size_t i = 0; i < peers; ++i) {
      proto.targets.push_back({bytes, i * bytes, 0, MrDesc(), static_cast<uint32_t>(i)});
      t.targets.push_back({static_cast<uint32_t>(i), i * bytes, bytes, 0, bytes});
      slices.push_back({bytes, 0, 0});
    }
    Result<PreparedScatter> prepared = engine.prepare_scatter(t);
    if (!prepared.ok()) return prepared.status();
    const uint64_t imms_per_peer = imm_count_of_scatter_target(bytes, ScatterSharding::kByPeer, RoundRobin{}, domains);

    uint32_t imm = 0;
    ScatterRequest r;
    auto plain = [&](size_t n, CallTimes* times) {
      return burst(
          n, times, "plain scatter",
          [&] {
            r = proto;
            r.imm = imm;
          },
          [&](Completion done) { return engine.submit_scatter(std::move(r), std::move(done)); });
    };
    auto prep = [&](size_t n, CallTimes* times) {
      return burst(
          n, times, "prepared scatter", [] {},
          [&](Completion done) { return engine.submit_prepared(*prepared, slices, imm, std::move(done)); });
    };
    for (int form = 0; form < 2; ++form) {  // each form onto cleared regions, every peer checked
      reply = init.peer().call("peer_clear " + std::to_string(peers) + " " + std::to_string(bytes));
      if (!reply.ok()) return reply.status();
      imm = init.next_imm();
      FABRIC_LIB_RETURN_IF_ERROR(form == 0 ? plain(1, nullptr) : prep(1, nullptr));
      for (size_t i = 0; i < peers; ++i) {
        reply = init.peer().call("peer_check " + std::to_string(i) + " " + std::to_string(imm) + " " +
                                 std::to_string(imms_per_peer) + " " + std::to_string(bytes) + " " +
                                 std::to_string(hash_region(src.data() + i * bytes, bytes)));
        if (!reply.ok()) {
          return Status(reply.status().code(), std::string(form ? "prepared" : "plain") + " scatter, peer " +
                                                   std::to_string(i) + ": " + reply.status().message());
        }
      }
      init.note_verified();
    }
    imm = init.next_imm();
    CallTimes plain_t, prep_t;
    Result<size_t> submits = alternate(o, plain, prep, plain_t, prep_t);
    if (!submits.ok()) return submits.status();
    for (size_t i = 0; i < peers; ++i) {
      reply = init.peer().call("peer_check " + std::to_string(i) + " " + std::to_string(imm) + " " +
                               std::to_string(2 * *submits * imms_per_peer) + " 0 -");
      if (!reply.ok()) return reply.status();
    }
    add_rows(init, rows, "scatter", peers, plain_t, prep_t);
    init.progress().step(init.provider() + " submit call, scatter to " + std::to_string(peers) + " peers (" +
                         format_size(bytes) + " each): " + compare_text(plain_t, prep_t));
  }
  engine.unregister_memory(mr->handle);
  return ok_status();
}

}  // namespace

Status run_prepared_mode(Initiator& init, std::vector<Row>& rows) {
  const BenchOptions& o = init.options();
  // Before the engine, so they outlive every write from them.
  AlignedBuffer paged_src(o.pages_per_request * kPage);
  AlignedBuffer scatter_src(std::max<size_t>(1, max_peers_of(o)) * o.scatter_bytes);
  Result<std::unique_ptr<TransferEngine>> built = init.build_latency_engine();
  if (!built.ok()) return built.status();
  TransferEngine& engine = **built;
  Status s = run_paged(init, engine, paged_src, rows);
  if (s.ok()) s = run_scatter(init, engine, scatter_src, rows);
  engine.stop();
  return s;
}

}  // namespace fabric_lib::bench

// ipc-domain-bench: the ipc domain's own CPU work per page write, the GPU taken out.
//
// On the GPU machine a paged write over ipc is bound by the worker thread's work per page (the
// copies themselves are fast), so that work is what this measures, on any machine. Two
// IpcDomains in this process: an initiator and a target that registered "GPU memory". A fake GPU
// backend accepts that memory and finishes every copy at the next poll without moving a byte.
// What is left is the domain's path per WR: the checks and region lookup of post_write, the op,
// the copy request, the flush, the completion event, the imm pushed into the target's ring, and
// the target turning it into an imm event.
//
// Prints ns per WR and the page rate that caps (and the GB/s it means at 4 KiB pages), for WRs
// posted one by one (post_write, each its own context) and as runs (post_writes, a run sharing
// one context and imm as the engine's do: one op, one gather copy, one imm record and one
// completion event per run; post_pages, the same run given as its page lists, as the engine posts
// a paged write), in passes of --pass WRs as the engine's worker posts them. No
// baseline: this is the domain's share of the work per page, to put beside
// engine-overhead-bench's share of the engine. A benchmark, not a timed test: CI runs --quick for
// the exit code (every WR completes once and every imm arrives once: the events' counts add up to
// exactly the WRs posted).
//
// Usage: ipc-domain-bench [--wrs N] [--pass P] [--repeats R] [--quick]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include <CLI/CLI.hpp>

#include "transport/ipc/ipc_domain.h"

namespace fabric_lib {
namespace {

using Clock = std::chrono::steady_clock;
using namespace transport;
using namespace transport::ipc;

// Copies finish at the next progress() and move nothing.
class InstantCopies final : public gpu::CopyEngine {
 public:
  gpu::CopySubmit submit(const gpu::CopyRequest& r, Status*) override {
    queued_.push_back(r.op);
    return gpu::CopySubmit::kAccepted;
  }
  void progress(std::vector<gpu::CopyDone>& done) override {
    for (uint64_t op : queued_) done.push_back({op, ok_status()});
    queued_.clear();
  }
  size_t inflight() const override { return queued_.size(); }
  void drain() override { queued_.clear(); }

 private:
  std::vector<uint64_t> queued_;
};

// "GPU memory" that is host memory of this process (the target is this process too, so the
// domain maps nothing: it writes at the registered address).
class FakeGpu final : public GpuBackend {
 public:
  Result<GpuExport> export_region(void*, size_t, bool) override {
    GpuExport e;
    e.device = 0;
    return e;
  }
  Result<void*> open_import(const RegionInfo&, int) override { return unsupported("fake: nothing to import"); }
  void close_import(void*, int) override {}
  int default_device() const override { return 0; }
  gpu::CopyEngine& copies() override { return copies_; }
  Status copy_to_host(void*, const void*, uint64_t, int) override { return unsupported("fake"); }

 private:
  InstantCopies copies_;
};

struct Options {
  uint64_t wrs = 1'000'000;
  uint64_t pass = 1024;     // WRs posted per pass (the ipc domain's wrs_per_pass)
  uint64_t inflight = 4096; // WRs in flight at most
  uint32_t repeats = 3;
};

constexpr uint64_t kPage = 4096;
constexpr uint64_t kPages = 1024;

Result<std::unique_ptr<IpcDomain>> open_domain() {
  IpcOptions o;
  o.max_inflight = 16384;
  o.gpu = [] { return Result<std::unique_ptr<GpuBackend>>(std::unique_ptr<GpuBackend>(new FakeGpu())); };
  return IpcDomain::open(std::move(o));
}

// How a pass's WRs reach the domain.
enum class Form { kPostWrite, kPostWrites, kPostPages };

const char* form_name(Form f) {
  switch (f) {
    case Form::kPostWrite: return "post_write";
    case Form::kPostWrites: return "post_writes";
    case Form::kPostPages: return "post_pages";
  }
  return "?";
}

// One timed run: `wrs` page writes with imm 7, one by one (post_write), or as runs of one pass
// (post_writes: WriteWrs; post_pages: the pass's page lists, as the engine posts a paged write).
Result<double> run_once(IpcDomain& initiator, IpcDomain& target, PeerHandle peer, const DomainMr& src, void* src_base,
                        const DomainMr& dst, const Options& o, Form form) {
  const bool batched = form != Form::kPostWrite;
  std::vector<Event> events;
  std::vector<WriteWr> run;
  std::vector<uint32_t> src_pages, dst_pages;
  uint64_t posted = 0, done = 0, imms = 0;
  const auto start = Clock::now();
  const auto give_up = start + std::chrono::seconds(60);
  while (done < o.wrs || imms < o.wrs) {
    run.clear();
    // The pass's WRs: as WriteWrs for the first two forms, as page lists (below) for post_pages —
    // building WriteWrs there would time this harness, not the domain.
    const uint64_t pass_wrs = std::min({o.pass, o.wrs - posted, o.inflight - (posted - done)});
    for (uint64_t i = 0; form != Form::kPostPages && i < pass_wrs; ++i) {
      const uint64_t k = posted + run.size();
      WriteWr wr;
      wr.src = static_cast<uint8_t*>(src_base) + (k * 7 % kPages) * kPage;
      wr.src_desc = src.desc;
      wr.length = kPage;
      wr.peer = peer;
      wr.remote_addr = dst.addr_base + (k * 13 % kPages) * kPage;
      wr.rkey = dst.rkey;
      wr.has_imm = true;
      wr.imm = 7;
      // A run shares one context, as the engine's runs do (their completions may then merge).
      wr.context = batched ? posted : k;
      run.push_back(wr);
    }
    Status error;
    if (form == Form::kPostPages) {
      src_pages.clear();
      dst_pages.clear();
      for (uint64_t k = posted; k < posted + pass_wrs; ++k) {
        src_pages.push_back(static_cast<uint32_t>(k * 7 % kPages));
        dst_pages.push_back(static_cast<uint32_t>(k * 13 % kPages));
      }
      PageRunWr pages;
      pages.src = static_cast<const uint8_t*>(src_base);
      pages.src_desc = src.desc;
      pages.peer = peer;
      pages.remote_addr = dst.addr_base;
      pages.rkey = dst.rkey;
      pages.page_length = pages.src_stride = pages.dst_stride = kPage;
      pages.src_pages = src_pages.data();
      pages.dst_pages = dst_pages.data();
      pages.count = pass_wrs;
      pages.has_imm = true;
      pages.imm = 7;
      pages.context = posted;
      pages.largest_known = true;  // as the engine's runs: no index reaches kPages
      pages.largest_src_page = pages.largest_dst_page = static_cast<uint32_t>(kPages - 1);
      PostResult last = PostResult::kPosted;
      posted += pass_wrs == 0 ? 0 : initiator.post_pages(pages, &last, &error);
      if (last == PostResult::kFailed) return error;
    } else if (batched) {
      PostResult last = PostResult::kPosted;
      posted += initiator.post_writes(run, &last, &error);
      if (last == PostResult::kFailed) return error;
    } else {
      for (const WriteWr& wr : run) {
        const PostResult r = initiator.post_write(wr, &error);
        if (r == PostResult::kFailed) return error;
        if (r == PostResult::kAgain) break;
        ++posted;
      }
    }
    events.clear();
    initiator.poll(events, o.pass);
    for (const Event& e : events) {
      if (e.kind != EventKind::kWriteDone || !e.status.ok()) return internal_error("unexpected initiator event");
      done += e.count;
    }
    events.clear();
    target.poll(events, o.pass);
    for (const Event& e : events) {
      if (e.kind != EventKind::kImm || e.imm != 7) return internal_error("unexpected target event");
      imms += e.count;  // one event per imm record: a run's imms, or equal ones coalesced
    }
    if (Clock::now() > give_up) return Status(ErrorCode::kDeadlineExceeded, "the run did not finish in 60 s");
  }
  if (done != o.wrs || imms != o.wrs) return internal_error("completion or imm count differs from the WRs posted");
  return std::chrono::duration<double, std::nano>(Clock::now() - start).count() / static_cast<double>(o.wrs);
}

int run(const Options& o) {
  auto initiator = open_domain();
  auto target = open_domain();
  if (!initiator.ok() || !target.ok()) {
    std::fprintf(stderr, "ipc-domain-bench: %s\n", (initiator.ok() ? target.status() : initiator.status()).to_string().c_str());
    return 1;
  }
  std::vector<uint8_t> src_bytes(kPages * kPage), dst_bytes(kPages * kPage);
  auto src = (*initiator)->register_memory(src_bytes.data(), src_bytes.size(), Access::kLocalOnly, MemoryKind::kCuda);
  auto dst = (*target)->register_memory(dst_bytes.data(), dst_bytes.size(), Access::kRemoteWrite, MemoryKind::kCuda);
  if (!src.ok() || !dst.ok()) {
    std::fprintf(stderr, "ipc-domain-bench: register: %s\n", (src.ok() ? dst.status() : src.status()).to_string().c_str());
    return 1;
  }
  auto peer = (*initiator)->add_peer((*target)->address());
  if (!peer.ok()) {
    std::fprintf(stderr, "ipc-domain-bench: add_peer: %s\n", peer.status().to_string().c_str());
    return 1;
  }
  std::printf("ipc-domain-bench: %llu page writes of 4 KiB with imm per run, %llu per pass, best of %u\n",
              static_cast<unsigned long long>(o.wrs), static_cast<unsigned long long>(o.pass), o.repeats);
  for (Form form : {Form::kPostWrite, Form::kPostWrites, Form::kPostPages}) {
    double best = 1e300;
    for (uint32_t k = 0; k < o.repeats; ++k) {
      Result<double> ns = run_once(**initiator, **target, *peer, *src, src_bytes.data(), *dst, o, form);
      if (!ns.ok()) {
        std::fprintf(stderr, "ipc-domain-bench: %s\n", ns.status().to_string().c_str());
        return 1;
      }
      best = std::min(best, *ns);
    }
    std::printf("ipc-domain-bench: %-11s %6.1f ns per WR (initiator and target) = at most %.1f Mpages/s, %.0f GB/s at 4 KiB pages\n",
                form_name(form), best, 1e3 / best, 1e3 / best * 4096 / 1e3);
  }
  return 0;
}

}  // namespace
}  // namespace fabric_lib

int main(int argc, char** argv) {
  fabric_lib::Options o;
  CLI::App app{"ipc-domain-bench: the ipc domain's CPU work per page write, the GPU taken out"};
  app.add_option("--wrs", o.wrs, "page writes per timed run")->check(CLI::PositiveNumber);
  app.add_option("--pass", o.pass, "WRs posted per pass")->check(CLI::PositiveNumber);
  app.add_option("--repeats", o.repeats, "runs per form; the best counts")->check(CLI::Range(1, 100));
  bool quick = false;
  app.add_flag("--quick", quick, "20000 WRs, one run (smoke test)");
  CLI11_PARSE(app, argc, argv);
  if (quick) {
    o.wrs = 20000;
    o.repeats = 1;
  }
  return fabric_lib::run(o);
}

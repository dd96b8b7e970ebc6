// single and paged: the same traffic through the engine and through the raw fi_writedata loop,
// alternating, best of --repeats each; both verified byte-for-byte first.
#include <algorithm>
#include <numeric>
#include <random>

#include "fabric_bench/modes.h"
#include "fabric_bench/stats.h"

namespace fabric_lib::bench {
namespace {

// One point of a bandwidth sweep, described for both paths.
struct BandwidthWorkload {
  std::string mode;
  uint64_t size = 0;               // write or page size (the row's size)
  uint64_t slots = 0;              // requests of one full iteration (request i uses slot i % slots)
  size_t window = 1;               // requests in flight (engine and raw alike)
  uint64_t bytes_per_request = 0;
  uint64_t ops_per_request = 0;    // writes (single) or pages (paged)
  uint64_t imms_per_request = 0;   // what the engine's target counts per request
  uint64_t raw_wrs_per_request = 0;
  EngineSubmitFn submit;           // request i, with the run's imm
  RawPlanFn raw_plan;
  uint64_t verify_bytes = 0;       // the target region's bytes one iteration determines
  uint64_t verify_hash = 0;        // their expected hash
};

std::string hash_word(uint64_t h) { return std::to_string(h); }

// Runs one full iteration (every slot once) through the engine and has the target check it.
Status verify_engine(Initiator& init, const BandwidthWorkload& w) {
  Result<std::vector<std::string>> r = init.peer().call("clear " + std::to_string(w.verify_bytes));
  if (!r.ok()) return r.status();
  const uint32_t imm = init.next_imm();
  Result<EngineRunResult> run = init.run_engine(w.submit, imm, w.window, w.slots, {});
  if (!run.ok()) return run.status();
  r = init.peer().call("check " + std::to_string(imm) + " " + std::to_string(w.slots * w.imms_per_request) + " " +
                       std::to_string(w.verify_bytes) + " " + hash_word(w.verify_hash));
  if (!r.ok()) return Status(r.status().code(), w.mode + " " + format_size(w.size) + " engine: " + r.status().message());
  init.note_verified();
  return ok_status();
}

Status verify_raw(Initiator& init, const BandwidthWorkload& w) {
  Result<std::vector<std::string>> r = init.peer().call("clear " + std::to_string(w.verify_bytes));
  if (r.ok()) r = init.peer().call("raw_start");
  if (!r.ok()) return r.status();
  const uint32_t imm = init.next_imm();
  Result<RawRunResult> run = init.raw().run(w.raw_plan, w.slots, {}, w.window, imm);
  if (!run.ok()) {
    init.peer().call("raw_stop");
    return run.status();
  }
  r = init.peer().call("raw_check " + std::to_string(imm) + " " + std::to_string(run->wrs) + " " +
                       std::to_string(w.verify_bytes) + " " + hash_word(w.verify_hash));
  Result<std::vector<std::string>> stop = init.peer().call("raw_stop");
  if (!r.ok()) return Status(r.status().code(), w.mode + " " + format_size(w.size) + " raw: " + r.status().message());
  if (!stop.ok()) return stop.status();
  init.note_verified();
  return ok_status();
}

std::chrono::duration<double> run_duration(const BenchOptions& o) {
  return o.iterations ? std::chrono::duration<double>(0) : std::chrono::duration<double>(o.duration_s);
}

// Timed engine run; the target confirms every imm arrived (and no more).
Result<Throughput> time_engine(Initiator& init, const BandwidthWorkload& w) {
  const BenchOptions& o = init.options();
  const uint32_t imm = init.next_imm();
  Result<EngineRunResult> run = init.run_engine(w.submit, imm, w.window, o.iterations, run_duration(o));
  if (!run.ok()) return run.status();
  Result<std::vector<std::string>> r =
      init.peer().call("wait " + std::to_string(imm) + " " + std::to_string(run->requests * w.imms_per_request));
  if (!r.ok()) return r.status();
  return throughput_of(run->requests * w.bytes_per_request, run->requests * w.ops_per_request, run->seconds);
}

Result<Throughput> time_raw(Initiator& init, const BandwidthWorkload& w) {
  const BenchOptions& o = init.options();
  Result<std::vector<std::string>> r = init.peer().call("raw_start");
  if (!r.ok()) return r.status();
  const uint32_t imm = init.next_imm();
  Result<RawRunResult> run = init.raw().run(w.raw_plan, o.iterations, run_duration(o), w.window, imm);
  if (run.ok()) r = init.peer().call("raw_wait " + std::to_string(imm) + " " + std::to_string(run->wrs));
  Result<std::vector<std::string>> stop = init.peer().call("raw_stop");
  if (!run.ok()) return run.status();
  if (!r.ok()) return r.status();
  if (!stop.ok()) return stop.status();
  return throughput_of(run->bytes, run->requests * w.ops_per_request, run->seconds);
}

Status measure(Initiator& init, const BandwidthWorkload& w, std::vector<Row>& rows) {
  const std::string& only = init.options().only;  // "engine" or "raw" when profiling one side
  const bool engine = only != "raw", raw = only != "engine";
  if (engine) FABRIC_LIB_RETURN_IF_ERROR(verify_engine(init, w));
  if (raw) FABRIC_LIB_RETURN_IF_ERROR(verify_raw(init, w));
  Throughput best_engine, best_raw;
  for (size_t rep = 0; rep < std::max<size_t>(1, init.options().repeats); ++rep) {
    if (engine) {
      Result<Throughput> e = time_engine(init, w);
      if (!e.ok()) return e.status();
      if (e->gbps > best_engine.gbps) best_engine = *e;
    }
    if (raw) {
      Result<Throughput> r = time_raw(init, w);
      if (!r.ok()) return r.status();
      if (r->gbps > best_raw.gbps) best_raw = *r;
    }
  }
  Row row = init.row(w.mode, w.size);
  if (engine) row.engine_gbps = best_engine.gbps, row.engine_mops = best_engine.mops;
  if (raw) row.raw_gbps = best_raw.gbps, row.raw_mops = best_raw.mops;
  if (engine && raw && best_raw.gbps > 0) row.ratio = best_engine.gbps / best_raw.gbps;
  rows.push_back(row);
  char line[256];
  std::snprintf(line, sizeof(line), "%s %s, %zu domain(s), %s, window %zu: engine %.2f Gbps, raw %.2f Gbps (%.2fx)",
                init.provider().c_str(), w.mode.c_str(), init.config().domains, format_size(w.size).c_str(), w.window,
                best_engine.gbps, best_raw.gbps, row.ratio.value_or(0));
  init.progress().step(line);
  return ok_status();
}

// The engine's sharding rule for a single write (requests.h), replayed for the raw baseline:
// min(domains, max(1, L / kMinShardBytes)) aligned shards, the first on a rotating domain.
void plan_raw_single(uint64_t length, size_t domains, uint64_t index, uint64_t src_offset, uint64_t dst_offset,
                     std::vector<RawWr>& out) {
  uint64_t shards = std::max<uint64_t>(1, std::min<uint64_t>(domains, length / kMinShardBytes));
  uint64_t per = (length + shards - 1) / shards;
  per = (per + kShardAlignBytes - 1) / kShardAlignBytes * kShardAlignBytes;
  if (per >= length) per = length;
  const uint32_t start = static_cast<uint32_t>(index % domains);
  uint32_t s = 0;
  for (uint64_t off = 0; off < length; off += per, ++s) {
    out.push_back({static_cast<uint32_t>((start + s) % domains), src_offset + off, dst_offset + off,
                   std::min(per, length - off)});
  }
}

}  // namespace

Status run_single_mode(Initiator& init, std::vector<Row>& rows) {
  const BenchOptions& o = init.options();
  const size_t domains = init.config().domains;
  auto slots_of = [&](uint64_t size) {
    return std::max<uint64_t>(1, std::min<uint64_t>(window_for(o, size), o.max_region_bytes / size));
  };
  uint64_t region = 0;
  for (uint64_t size : o.sizes) region = std::max(region, slots_of(size) * size);
  BenchRegions regions;
  FABRIC_LIB_RETURN_IF_ERROR(prepare_regions(init, region, regions));

  for (uint64_t size : o.sizes) {
    BandwidthWorkload w;
    w.mode = "single";
    w.size = size;
    w.slots = slots_of(size);
    w.window = window_for(o, size);
    w.bytes_per_request = size;
    w.ops_per_request = 1;
    WriteRequest proto{regions.src_mr.handle, 0, regions.dst, 0, size, std::nullopt, RoundRobin{o.max_shards}};
    w.imms_per_request = imm_count_of_write(size, RoundRobin{o.max_shards}, domains);
    w.submit = [&init, proto, slots = w.slots](uint64_t i, uint32_t imm, Completion done) {
      WriteRequest r = proto;
      r.src_offset = r.dst_offset = (i % slots) * r.length;
      r.imm = imm;
      return init.engine().submit_write(std::move(r), std::move(done));
    };
    w.raw_plan = [size, domains, slots = w.slots](uint64_t i, std::vector<RawWr>& out) {
      const uint64_t off = (i % slots) * size;
      plan_raw_single(size, domains, i, off, off, out);
    };
    w.verify_bytes = w.slots * size;
    w.verify_hash = hash_region(regions.src.data(), w.verify_bytes);
    FABRIC_LIB_RETURN_IF_ERROR(measure(init, w, rows));
  }
  return ok_status();
}

Status run_paged_mode(Initiator& init, std::vector<Row>& rows) {
  const BenchOptions& o = init.options();
  const size_t domains = init.config().domains;
  const uint64_t ppr = std::max<size_t>(1, o.pages_per_request);
  // Pages are `stride` apart on both sides: never contiguous, 4 KiB-aligned when the page is.
  auto stride_of = [](uint64_t page) { return page + 4096; };
  auto pages_of = [&](uint64_t page) {  // a multiple of ppr
    const uint64_t cap = std::max<uint64_t>(1, o.max_region_bytes / stride_of(page) / ppr);
    return std::min<uint64_t>(window_for(o, ppr * page), cap) * ppr;
  };
  uint64_t region = 0;
  for (uint64_t page : o.page_sizes) region = std::max(region, pages_of(page) * stride_of(page));
  BenchRegions regions;
  FABRIC_LIB_RETURN_IF_ERROR(prepare_regions(init, region, regions));
  std::mt19937_64 rng(o.seed);

  for (uint64_t page : o.page_sizes) {
    const uint64_t stride = stride_of(page);
    const uint64_t total = pages_of(page);
    std::vector<uint32_t> src_perm(total), dst_perm(total);
    std::iota(src_perm.begin(), src_perm.end(), 0u);
    std::iota(dst_perm.begin(), dst_perm.end(), 0u);
    std::shuffle(src_perm.begin(), src_perm.end(), rng);
    std::shuffle(dst_perm.begin(), dst_perm.end(), rng);

    BandwidthWorkload w;
    w.mode = "paged";
    w.size = page;
    w.slots = total / ppr;
    w.window = window_for(o, ppr * page);
    w.bytes_per_request = ppr * page;
    w.ops_per_request = ppr;
    std::vector<PagedWriteRequest> protos(w.slots);
    for (uint64_t s = 0; s < w.slots; ++s) {
      PagedWriteRequest& p = protos[s];
      p.src = regions.src_mr.handle;
      p.dst = regions.dst;
      p.page_length = page;
      p.src_pages.assign(src_perm.begin() + s * ppr, src_perm.begin() + (s + 1) * ppr);
      p.dst_pages.assign(dst_perm.begin() + s * ppr, dst_perm.begin() + (s + 1) * ppr);
      p.src_stride = p.dst_stride = stride;
    }
    PagedWriteRequest with_imm = protos[0];
    with_imm.imm = 1;  // imm_count_of counts the imms a request with an imm delivers
    w.imms_per_request = imm_count_of(with_imm, domains);
    w.submit = [&init, protos](uint64_t i, uint32_t imm, Completion done) {
      PagedWriteRequest r = protos[i % protos.size()];
      r.imm = imm;
      return init.engine().submit_paged_writes(std::move(r), std::move(done));
    };
    // The engine's page rule: contiguous runs of the index list, one per domain, rotating start.
    w.raw_plan = [protos, domains, stride, page](uint64_t i, std::vector<RawWr>& out) {
      const PagedWriteRequest& p = protos[i % protos.size()];
      const size_t n = p.src_pages.size();
      const size_t runs = std::min(domains, n);
      size_t begin = 0;
      for (size_t r = 0; r < runs; ++r) {
        const size_t count = n / runs + (r < n % runs ? 1 : 0);
        const uint32_t d = static_cast<uint32_t>((i + r) % domains);
        for (size_t k = begin; k < begin + count; ++k) {
          out.push_back({d, uint64_t{p.src_pages[k]} * stride, uint64_t{p.dst_pages[k]} * stride, page});
        }
        begin += count;
      }
    };
    // The target's image after one iteration: every slot's pages at their permuted places.
    w.verify_bytes = total * stride;
    AlignedBuffer shadow(w.verify_bytes);
    if (!shadow.ok()) return resource_exhausted("cannot allocate the verification image");
    for (const PagedWriteRequest& p : protos) {
      for (size_t k = 0; k < p.src_pages.size(); ++k) {
        std::memcpy(shadow.data() + uint64_t{p.dst_pages[k]} * stride, regions.src.data() + uint64_t{p.src_pages[k]} * stride,
                    page);
      }
    }
    w.verify_hash = hash_region(shadow.data(), w.verify_bytes);
    FABRIC_LIB_RETURN_IF_ERROR(measure(init, w, rows));
  }
  return ok_status();
}

}  // namespace fabric_lib::bench

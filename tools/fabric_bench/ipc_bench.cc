// fabric-bench --provider ipc, the initiator (see ipc_bench.h): GPU sources on GPU 0, the
// engine against cudaMemcpyPeerAsync of the same bytes, in one run.
#include "fabric_bench/ipc_bench.h"

#if FABRIC_LIB_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <numeric>
#include <random>
#include <thread>

#include "common/pattern.h"
#include "fabric_bench/output.h"
#include "fabric_bench/peer_link.h"
#include "fabric_bench/stats.h"
#include "fabric_bench/verify.h"
#include "fabric_lib/fabric_lib.h"

namespace fabric_lib::bench {

#if FABRIC_LIB_HAVE_CUDA
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kSrcGpu = 0;
constexpr size_t kBaselineStreams = 4;

Status cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return ok_status();
  return Status(ErrorCode::kProviderError, std::string(what) + ": " + cudaGetErrorString(e));
}

struct DeviceMemory {
  uint8_t* ptr = nullptr;
  DeviceMemory() = default;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  ~DeviceMemory() { cudaFree(ptr); }
  Status allocate(int device, uint64_t bytes) {
    cudaSetDevice(device);
    return cuda(cudaMalloc(reinterpret_cast<void**>(&ptr), std::max<uint64_t>(bytes, 1)), "cudaMalloc");
  }
};

// One request of a sweep point: the engine's submit, and the baseline's copy of the same bytes.
using SubmitFn = std::function<Result<TransferId>(uint64_t index, uint32_t imm, Completion done)>;
using CopyFn = std::function<cudaError_t(uint64_t index, cudaStream_t stream)>;

struct Point {
  std::string mode;
  uint64_t size = 0;
  uint64_t slots = 1;             // requests of one full iteration
  size_t window = 1;
  uint64_t bytes_per_request = 0;
  uint64_t ops_per_request = 0;   // writes or pages
  uint64_t imms_per_request = 0;
  uint64_t verify_bytes = 0;
  uint64_t verify_hash = 0;
  SubmitFn submit;
};

class IpcBench {
 public:
  IpcBench(const BenchOptions& o, PeerLink& peer) : o_(o), peer_(peer) {}
  Status run(size_t domains, std::vector<Row>& rows);

 private:
  Status build_engine(size_t domains, const std::string& copy_mode, bool spin);
  Result<Throughput> time_engine(const Point& p);
  // Where the engine's requests spent their time in the last time_engine() run, from its
  // latency histograms' sums (metrics are on by default): a line for the progress output.
  std::string stages_of(const Point& p, const Metrics& before, const Metrics& after) const;
  Status verify_engine(const Point& p);
  Result<Throughput> time_baseline(const Point& p, const CopyFn& copy);
  Status run_point(Point& p, const CopyFn& copy, const std::optional<Throughput>& baseline, std::vector<Row>& rows,
                   Throughput* baseline_out);
  Status single(std::vector<Row>& rows);
  Status paged(std::vector<Row>& rows);
  Status imm(std::vector<Row>& rows);
  uint32_t next_imm() { return imm_seq_++ % 250 + 1; }
  std::chrono::duration<double> duration() const {
    return std::chrono::duration<double>(o_.iterations ? 0.0 : o_.duration_s);
  }
  void step(const std::string& text) {
    if (o_.progress) std::fprintf(stderr, "fabric-bench ipc: %s\n", text.c_str());
  }

  const BenchOptions& o_;
  PeerLink& peer_;
  size_t domains_ = 1;
  int peer_gpu_ = 0;
  std::unique_ptr<TransferEngine> engine_;
  uint32_t imm_seq_ = 0;
  std::string last_stages_;  // stages_of() the last time_engine() run
};

Status IpcBench::build_engine(size_t domains, const std::string& copy_mode, bool spin) {
  if (engine_) engine_->stop();
  engine_.reset();
  // The GPU backend reads the copy mode when the domain first registers GPU memory.
  if (copy_mode.empty()) unsetenv("FABRIC_LIB_NVLINK_COPY");
  else setenv("FABRIC_LIB_NVLINK_COPY", copy_mode.c_str(), 1);
  cudaSetDevice(kSrcGpu);
  Result<std::unique_ptr<TransferEngine>> e = TransferEngineBuilder()
                                                  .provider("ipc")
                                                  .domains_per_group(domains)
                                                  .idle_policy(spin ? IdlePolicy::kSpin : IdlePolicy::kAdaptive)
                                                  .build();
  if (!e.ok()) return e.status();
  engine_ = std::move(e).value();
  return ok_status();
}

// Keeps `window` requests in flight (the calling thread polls), by count or by time.
Result<Throughput> IpcBench::time_engine(const Point& p) {
  CompletionCounter done;
  const uint32_t imm = next_imm();
  const uint64_t max = o_.iterations;
  const Metrics before = engine_->metrics();  // outside the timed interval
  const auto start = Clock::now();
  const auto stop_at = o_.iterations ? Clock::time_point::max() : start + std::chrono::duration_cast<Clock::duration>(duration());
  uint64_t submitted = 0;
  while ((max == 0 || submitted < max) && (submitted % 8 != 0 || Clock::now() < stop_at)) {
    while (submitted - done.finished() >= p.window) std::this_thread::yield();
    Result<TransferId> id = p.submit(submitted, imm, Completion::counter(done));
    if (!id.ok()) return id.status();
    ++submitted;
  }
  if (!done.wait_for(submitted, std::chrono::seconds(120))) return Status(ErrorCode::kDeadlineExceeded, "engine requests did not complete");
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  last_stages_ = stages_of(p, before, engine_->metrics());
  if (done.errors) return Status(ErrorCode::kProviderError, std::to_string(done.errors.load()) + " engine requests failed");
  Result<std::vector<std::string>> r = peer_.call("wait " + std::to_string(imm) + " " + std::to_string(submitted * p.imms_per_request));
  if (!r.ok()) return r.status();
  return throughput_of(submitted * p.bytes_per_request, submitted * p.ops_per_request, seconds);
}

std::string IpcBench::stages_of(const Point& p, const Metrics& before, const Metrics& after) const {
  if (!after.detailed) return "";
  // Mean in microseconds of the samples `b` added over `a`.
  auto mean_us = [](const LatencyHistogram& a, const LatencyHistogram& b) {
    return b.count > a.count ? (b.sum_seconds - a.sum_seconds) * 1e6 / static_cast<double>(b.count - a.count) : 0.0;
  };
  const OpType op = p.mode == "paged" ? OpType::kPagedWrite : OpType::kWrite;
  const OpMetrics& o0 = before.op(op);
  const OpMetrics& o1 = after.op(op);
  LatencyHistogram wr0, wr1;
  for (const PeerMetrics& peer : before.peers) wr0 += peer.wr_latency;
  for (const PeerMetrics& peer : after.peers) wr1 += peer.wr_latency;
  const uint64_t requests = o1.submit_to_post.count - o0.submit_to_post.count;
  // Bucket 0 holds the submits posted within 1 us, those posted inside their submit call (0) too.
  const uint64_t fast = o1.submit_to_post.buckets[0] - o0.submit_to_post.buckets[0];
  char line[256];
  std::snprintf(line, sizeof(line),
                "; means: submit->first post %.2f us (%.0f %% within 1 us), WR posted->polled %.2f us, "
                "submit->delivered %.2f us",
                mean_us(o0.submit_to_post, o1.submit_to_post), requests ? 100.0 * fast / requests : 0.0,
                mean_us(wr0, wr1), mean_us(o0.request_latency, o1.request_latency));
  return line;
}

Status IpcBench::verify_engine(const Point& p) {
  Result<std::vector<std::string>> r = peer_.call("clear " + std::to_string(p.verify_bytes));
  if (!r.ok()) return r.status();
  CompletionCounter done;
  const uint32_t imm = next_imm();
  for (uint64_t i = 0; i < p.slots; ++i) {
    while (i - done.finished() >= p.window) std::this_thread::yield();
    Result<TransferId> id = p.submit(i, imm, Completion::counter(done));
    if (!id.ok()) return id.status();
  }
  if (!done.wait_for(p.slots, std::chrono::seconds(120)) || done.errors) return internal_error("verification writes failed");
  r = peer_.call("check " + std::to_string(imm) + " " + std::to_string(p.slots * p.imms_per_request) + " " +
                 std::to_string(p.verify_bytes) + " " + std::to_string(p.verify_hash));
  if (!r.ok()) return Status(r.status().code(), p.mode + " " + format_size(p.size) + ": " + r.status().message());
  return ok_status();
}

// cudaMemcpyPeerAsync of each request's bytes, over kBaselineStreams streams, at most `window`
// requests in flight (an event per request slot).
Result<Throughput> IpcBench::time_baseline(const Point& p, const CopyFn& copy) {
  cudaSetDevice(kSrcGpu);
  std::vector<cudaStream_t> streams(kBaselineStreams);
  std::vector<cudaEvent_t> events(p.window);
  for (auto& s : streams) FABRIC_LIB_RETURN_IF_ERROR(cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate"));
  for (auto& e : events) FABRIC_LIB_RETURN_IF_ERROR(cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate"));
  Status status;
  const auto start = Clock::now();
  const auto stop_at = o_.iterations ? Clock::time_point::max() : start + std::chrono::duration_cast<Clock::duration>(duration());
  uint64_t n = 0;
  while ((o_.iterations == 0 || n < o_.iterations) && (n % 8 != 0 || Clock::now() < stop_at)) {
    const size_t slot = n % p.window;
    if (n >= p.window) cudaEventSynchronize(events[slot]);  // request n - window is done
    cudaStream_t s = streams[n % kBaselineStreams];
    status = cuda(copy(n, s), "cudaMemcpyPeerAsync");
    if (status.ok()) status = cuda(cudaEventRecord(events[slot], s), "cudaEventRecord");
    if (!status.ok()) break;
    ++n;
  }
  for (auto& s : streams) cudaStreamSynchronize(s);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  for (auto& s : streams) cudaStreamDestroy(s);
  for (auto& e : events) cudaEventDestroy(e);
  if (!status.ok()) return status;
  return throughput_of(n * p.bytes_per_request, n * p.ops_per_request, seconds);
}

Status IpcBench::run_point(Point& p, const CopyFn& copy, const std::optional<Throughput>& known_baseline,
                              std::vector<Row>& rows, Throughput* baseline_out) {
  FABRIC_LIB_RETURN_IF_ERROR(verify_engine(p));
  Throughput best_engine, best_raw = known_baseline.value_or(Throughput{});
  std::string stages;  // the best engine run's
  for (size_t rep = 0; rep < std::max<size_t>(1, o_.repeats); ++rep) {
    Result<Throughput> e = time_engine(p);
    if (!e.ok()) return e.status();
    if (e->gbps > best_engine.gbps) {
      best_engine = *e;
      stages = last_stages_;
    }
    if (!known_baseline) {
      Result<Throughput> r = time_baseline(p, copy);
      if (!r.ok()) return r.status();
      if (r->gbps > best_raw.gbps) best_raw = *r;
    }
  }
  if (baseline_out) *baseline_out = best_raw;
  Row row;
  row.mode = p.mode;
  row.provider = "ipc";
  row.domains = domains_;
  row.size = p.size;
  row.engine_gbps = best_engine.gbps;
  row.engine_mops = best_engine.mops;
  row.raw_gbps = best_raw.gbps;
  row.raw_mops = best_raw.mops;
  if (best_raw.gbps > 0) row.ratio = best_engine.gbps / best_raw.gbps;
  rows.push_back(row);
  char line[256];
  std::snprintf(line, sizeof(line), "%s %s, %zu domain(s), window %zu: engine %.1f Gbps, cudaMemcpyPeerAsync %.1f Gbps (%.2fx)",
                p.mode.c_str(), format_size(p.size).c_str(), domains_, p.window, best_engine.gbps, best_raw.gbps,
                row.ratio.value_or(0));
  step(line + stages);
  return ok_status();
}

Status IpcBench::single(std::vector<Row>& rows) {
  // Requests cycle over the whole region (--max-region, 256 MiB by default), past the GPU's L2
  // (50 MiB on an H200), on both sides: the engine's and the baseline's copies see the same
  // working set, so neither is an L2 figure.
  auto slots_of = [&](uint64_t size) { return std::max<uint64_t>(1, o_.max_region_bytes / size); };
  uint64_t region = 0;
  for (uint64_t size : o_.sizes) region = std::max(region, slots_of(size) * size);
  Result<std::vector<std::string>> reply = peer_.call("region " + std::to_string(region));
  if (!reply.ok() || reply->empty()) return reply.ok() ? malformed("empty region reply") : reply.status();
  Result<MrDesc> dst = MrDesc::from_hex((*reply)[0]);
  if (!dst.ok()) return dst.status();
  std::vector<uint8_t> pattern(region);
  tools::fill_pattern(pattern.data(), region, o_.seed);
  DeviceMemory src, peer_dst;
  FABRIC_LIB_RETURN_IF_ERROR(peer_dst.allocate(peer_gpu_, region));
  FABRIC_LIB_RETURN_IF_ERROR(src.allocate(kSrcGpu, region));
  FABRIC_LIB_RETURN_IF_ERROR(cuda(cudaMemcpy(src.ptr, pattern.data(), region, cudaMemcpyHostToDevice), "cudaMemcpy"));
  Result<MrRegistration> mr = engine_->register_memory(src.ptr, region, Access::kLocalOnly, MemoryKind::kCuda);
  if (!mr.ok()) return mr.status();
  for (uint64_t size : o_.sizes) {
    Point p;
    p.mode = "single";
    p.size = size;
    p.slots = slots_of(size);
    p.window = window_for(o_, size);
    p.bytes_per_request = size;
    p.ops_per_request = 1;
    const Route route = o_.pin_domain >= 0 ? Route{Pinned{static_cast<uint32_t>(o_.pin_domain)}} : Route{RoundRobin{o_.max_shards}};
    p.imms_per_request = imm_count_of_write(size, route, domains_);
    p.verify_bytes = p.slots * size;
    p.verify_hash = hash_region(pattern.data(), p.verify_bytes);
    WriteRequest proto{mr->handle, 0, *dst, 0, size, std::nullopt, route};
    p.submit = [this, proto, slots = p.slots](uint64_t i, uint32_t imm, Completion done) {
      WriteRequest r = proto;
      r.src_offset = r.dst_offset = (i % slots) * r.length;
      r.imm = imm;
      return engine_->submit_write(std::move(r), std::move(done));
    };
    CopyFn copy = [&, size, slots = p.slots](uint64_t i, cudaStream_t s) {
      const uint64_t off = (i % slots) * size;
      return cudaMemcpyPeerAsync(peer_dst.ptr + off, peer_gpu_, src.ptr + off, kSrcGpu, size, s);
    };
    FABRIC_LIB_RETURN_IF_ERROR(run_point(p, copy, std::nullopt, rows, nullptr));
  }
  engine_->unregister_memory(mr->handle);
  // The baseline's bytes are checked too: its target holds the pattern.
  std::vector<uint8_t> back(std::min<uint64_t>(region, 64ull << 20));
  FABRIC_LIB_RETURN_IF_ERROR(cuda(cudaMemcpy(back.data(), peer_dst.ptr, back.size(), cudaMemcpyDeviceToHost), "cudaMemcpy"));
  if (hash_region(back.data(), back.size()) != hash_region(pattern.data(), back.size())) {
    return internal_error("the cudaMemcpyPeerAsync baseline delivered wrong bytes");
  }
  engine_->stop();  // before the source memory goes
  return ok_status();
}

Status IpcBench::paged(std::vector<Row>& rows) {
  const uint64_t ppr = std::max<size_t>(1, o_.pages_per_request);
  auto stride_of = [](uint64_t page) { return page + 4096; };  // never contiguous
  // Every request writes its own pages, cycling over the whole region (past the L2, as single's).
  auto pages_of = [&](uint64_t page) { return std::max<uint64_t>(1, o_.max_region_bytes / stride_of(page) / ppr) * ppr; };
  uint64_t region = 0;
  for (uint64_t page : o_.page_sizes) region = std::max(region, pages_of(page) * stride_of(page));
  Result<std::vector<std::string>> reply = peer_.call("region " + std::to_string(region));
  if (!reply.ok() || reply->empty()) return reply.ok() ? malformed("empty region reply") : reply.status();
  Result<MrDesc> dst = MrDesc::from_hex((*reply)[0]);
  if (!dst.ok()) return dst.status();
  std::vector<uint8_t> pattern(region);
  tools::fill_pattern(pattern.data(), region, o_.seed + 1);
  DeviceMemory src, peer_dst;
  FABRIC_LIB_RETURN_IF_ERROR(peer_dst.allocate(peer_gpu_, region));
  FABRIC_LIB_RETURN_IF_ERROR(src.allocate(kSrcGpu, region));
  FABRIC_LIB_RETURN_IF_ERROR(cuda(cudaMemcpy(src.ptr, pattern.data(), region, cudaMemcpyHostToDevice), "cudaMemcpy"));
  std::vector<std::string> modes = {""};
  for (const std::string& m : o_.ipc_copy_modes) modes.push_back(m);
  std::mt19937_64 rng(o_.seed);
  for (uint64_t page : o_.page_sizes) {
    const uint64_t stride = stride_of(page), total = pages_of(page);
    std::vector<uint32_t> src_perm(total), dst_perm(total);
    std::iota(src_perm.begin(), src_perm.end(), 0u);
    std::iota(dst_perm.begin(), dst_perm.end(), 0u);
    std::shuffle(src_perm.begin(), src_perm.end(), rng);
    std::shuffle(dst_perm.begin(), dst_perm.end(), rng);
    std::vector<uint8_t> shadow(total * stride, 0);
    for (uint64_t k = 0; k < total; ++k) std::memcpy(shadow.data() + dst_perm[k] * stride, pattern.data() + src_perm[k] * stride, page);
    std::optional<Throughput> baseline;
    for (const std::string& mode : modes) {
      FABRIC_LIB_RETURN_IF_ERROR(build_engine(domains_, mode, o_.spin));
      Result<MrRegistration> mr = engine_->register_memory(src.ptr, region, Access::kLocalOnly, MemoryKind::kCuda);
      if (!mr.ok()) return mr.status();
      Point p;
      p.mode = mode.empty() ? "paged" : "paged/" + mode;
      p.size = page;
      p.slots = total / ppr;
      p.window = window_for(o_, ppr * page);
      p.bytes_per_request = ppr * page;
      p.ops_per_request = ppr;
      std::vector<PagedWriteRequest> protos(p.slots);
      for (uint64_t s = 0; s < p.slots; ++s) {
        PagedWriteRequest& r = protos[s];
        r.src = mr->handle;
        r.dst = *dst;
        r.page_length = page;
        r.src_pages.assign(src_perm.begin() + s * ppr, src_perm.begin() + (s + 1) * ppr);
        r.dst_pages.assign(dst_perm.begin() + s * ppr, dst_perm.begin() + (s + 1) * ppr);
        r.src_stride = r.dst_stride = stride;
        if (o_.pin_domain >= 0) r.route = Pinned{static_cast<uint32_t>(o_.pin_domain)};
      }
      PagedWriteRequest with_imm = protos[0];
      with_imm.imm = 1;
      p.imms_per_request = imm_count_of(with_imm, domains_);
      p.verify_bytes = total * stride;
      p.verify_hash = hash_region(shadow.data(), shadow.size());
      p.submit = [this, protos](uint64_t i, uint32_t imm, Completion done) {
        PagedWriteRequest r = protos[i % protos.size()];
        r.imm = imm;
        return engine_->submit_paged_writes(std::move(r), std::move(done));
      };
      // The ceiling: the same bytes in one contiguous peer copy per request, request i's copy at
      // slot i of the region on both sides (the engine's working set).
      CopyFn copy = [&, bytes = p.bytes_per_request, slots = p.slots](uint64_t i, cudaStream_t s) {
        const uint64_t off = (i % slots) * bytes;
        return cudaMemcpyPeerAsync(peer_dst.ptr + off, peer_gpu_, src.ptr + off, kSrcGpu, bytes, s);
      };
      Throughput measured;
      FABRIC_LIB_RETURN_IF_ERROR(run_point(p, copy, baseline, rows, &measured));
      baseline = measured;
      engine_->stop();  // before the next engine (and the source memory) replace this one
    }
  }
  return build_engine(domains_, "", o_.spin);
}

Status IpcBench::imm(std::vector<Row>& rows) {
  AlignedBuffer inbox(4096);
  const bool spin = std::thread::hardware_concurrency() >= 4;
  FABRIC_LIB_RETURN_IF_ERROR(build_engine(domains_, "", spin));
  Result<std::vector<std::string>> reply = peer_.call("region 4096");
  if (!reply.ok() || reply->empty()) return reply.ok() ? malformed("empty region reply") : reply.status();
  Result<MrDesc> target = MrDesc::from_hex((*reply)[0]);
  if (!target.ok()) return target.status();
  Result<MrRegistration> mine = engine_->register_memory(inbox.data(), inbox.size(), Access::kRemoteWrite);
  if (!mine.ok()) return mine.status();
  const uint32_t ping = next_imm(), pong = next_imm();
  reply = peer_.call("echo " + std::to_string(ping) + " " + std::to_string(pong) + " " + mine->desc.to_hex());
  if (!reply.ok()) return reply.status();
  constexpr size_t kWarmup = 50;
  const size_t total = kWarmup + o_.latency_iterations;
  std::vector<double> rtt_us;
  Status failure;
  for (size_t i = 0; i < total && failure.ok(); ++i) {
    const auto t0 = Clock::now();
    Result<TransferId> id = engine_->submit_imm(ping, *target, Completion());
    if (!id.ok()) failure = id.status();
    while (failure.ok() && engine_->imms().count(pong) < i + 1) {
      if (Clock::now() - t0 > std::chrono::seconds(30)) failure = Status(ErrorCode::kDeadlineExceeded, "an imm round trip never came back");
    }
    if (i >= kWarmup) rtt_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  reply = peer_.call("echo_end " + std::to_string(ping) + " " + std::to_string(total));
  const uint64_t pongs = engine_->imms().count(pong);
  engine_->stop();
  engine_.reset();
  if (!failure.ok()) return failure;
  if (!reply.ok()) return reply.status();
  if (pongs != total) return internal_error(std::to_string(pongs) + " pongs for " + std::to_string(total) + " pings");
  std::optional<LatencySummary> s = summarize(rtt_us);
  Row row;
  row.mode = "imm";
  row.provider = "ipc";
  row.domains = domains_;
  if (s) row.p50_us = s->p50, row.p99_us = s->p99;
  rows.push_back(row);
  char line[160];
  std::snprintf(line, sizeof(line), "imm round trip, %zu domain(s): p50 %.2f us, p99 %.2f us", domains_, s ? s->p50 : 0.0,
                s ? s->p99 : 0.0);
  step(line);
  return ok_status();
}

Status IpcBench::run(size_t domains, std::vector<Row>& rows) {
  domains_ = domains;
  Result<std::vector<std::string>> reply = peer_.call("setup " + std::to_string(domains) + " " + (o_.target_spin ? "1" : "0"));
  if (!reply.ok()) return reply.status();
  peer_gpu_ = reply->empty() ? 0 : std::atoi((*reply)[0].c_str());
  if (peer_gpu_ != kSrcGpu) {
    // Without peer access cudaMemcpyPeerAsync is staged through the host (~36 GB/s on the H200s):
    // the baseline must be the direct NVLink copy.
    int can = 0;
    cudaDeviceCanAccessPeer(&can, kSrcGpu, peer_gpu_);
    cudaSetDevice(kSrcGpu);
    const cudaError_t e = can ? cudaDeviceEnablePeerAccess(peer_gpu_, 0) : cudaErrorPeerAccessUnsupported;
    if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) {
      step(std::string("warning: no peer access GPU ") + std::to_string(kSrcGpu) + " -> " + std::to_string(peer_gpu_) +
           " (" + cudaGetErrorString(e) + "): the baseline is staged through the host");
    }
    cudaGetLastError();  // clear the sticky "already enabled"
  }
  step("GPU " + std::to_string(kSrcGpu) + " -> GPU " + std::to_string(peer_gpu_) + ", " + std::to_string(domains) + " domain(s)");
  for (Mode m : o_.modes) {
    Status s;
    if (m == Mode::kSingle) {
      s = build_engine(domains, "", o_.spin);
      if (s.ok()) s = single(rows);
    } else if (m == Mode::kPaged) {
      s = paged(rows);
    } else if (m == Mode::kImm) {
      s = imm(rows);
    } else {
      step(std::string("mode ") + mode_name(m) + " is not measured on ipc; skipped");
    }
    if (!s.ok()) return Status(s.code(), std::string(mode_name(m)) + " mode: " + s.message());
  }
  if (engine_) engine_->stop();
  engine_.reset();
  return ok_status();
}

// The targets, on this run's rows.
void print_ipc_targets(std::ostream& out, const std::vector<Row>& rows) {
  out << "\nipc targets (raw = cudaMemcpyPeerAsync of the same bytes, in this run):\n";
  for (const Row& r : rows) {
    if (!r.ratio) continue;
    const bool big_single = r.mode == "single" && r.size >= (256u << 10);
    const bool big_paged = r.mode.rfind("paged", 0) == 0 && r.size >= (64u << 10);
    const bool small_paged = r.mode.rfind("paged", 0) == 0 && r.size >= (4u << 10) && r.size <= (32u << 10);
    char line[200];
    if (big_single || big_paged) {
      std::snprintf(line, sizeof(line), "  %-14s %9s, %zu dom: %.2fx  (target >= 0.90x) %s\n", r.mode.c_str(),
                    format_size(r.size).c_str(), r.domains, *r.ratio, *r.ratio >= 0.90 ? "met" : "MISSED");
      out << line;
    } else if (small_paged) {
      std::snprintf(line, sizeof(line), "  %-14s %9s, %zu dom: %.2fx, %.3f Mpages/s (report)\n", r.mode.c_str(),
                    format_size(r.size).c_str(), r.domains, *r.ratio, r.engine_mops.value_or(0));
      out << line;
    }
  }
  for (const Row& r : rows) {
    if (r.mode == "imm" && r.p50_us) {
      char line[120];
      std::snprintf(line, sizeof(line), "  imm round trip, %zu dom: p50 %.2f us, p99 %.2f us\n", r.domains, *r.p50_us, r.p99_us.value_or(0));
      out << line;
    }
  }
}

}  // namespace

int run_ipc_bench(const BenchOptions& o, const std::string& argv0) {
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus == 0) {
    std::fprintf(stderr, "fabric-bench: --provider ipc needs a CUDA GPU\n");
    return 2;
  }
  Result<PeerLink> peer = spawn_local_peer(argv0, {"--provider", "ipc"});
  if (!peer.ok()) {
    std::fprintf(stderr, "fabric-bench: %s\n", peer.status().to_string().c_str());
    return 1;
  }
  std::vector<Row> rows;
  Status status;
  for (size_t d : o.domains) {
    IpcBench bench(o, *peer);
    status = bench.run(d, rows);
    if (!status.ok()) break;
  }
  const bool peer_ok = peer->finish();
  if (o.format == "csv") {
    print_csv(std::cout, rows);
  } else {
    print_table(std::cout, rows, o);
    print_ipc_targets(std::cout, rows);
  }
  std::cout.flush();
  if (!o.csv_file.empty()) {
    std::ofstream csv(o.csv_file);
    print_csv(csv, rows);
  }
  if (!status.ok()) {
    std::fprintf(stderr, "fabric-bench: FAILED: %s\n", status.to_string().c_str());
    return 1;
  }
  if (!peer_ok) {
    std::fprintf(stderr, "fabric-bench: the target process did not exit cleanly\n");
    return 1;
  }
  std::fprintf(stderr, "fabric-bench: verification passed (every point's bytes and imm counts checked at the target)\n");
  return 0;
}

#else

int run_ipc_bench(const BenchOptions&, const std::string&) {
  std::fprintf(stderr, "fabric-bench: --provider ipc needs a CUDA build (FABRIC_LIB_CUDA=ON)\n");
  return 2;
}

#endif

}  // namespace fabric_lib::bench

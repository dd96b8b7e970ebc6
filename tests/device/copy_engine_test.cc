// The CUDA copy engine's page-copy kernel, driven directly (no transport): flushes that mix gather
// requests and plain copies of several lengths — whole and partial 16 KiB pieces, unaligned ends,
// more kernel runs than one launch carries — move exactly the bytes asked, report every request
// once and ok, and touch nothing else. Gathers whose segments the caller wrote into the engine's
// pinned room (segment_room), over many flushes in flight, keep their segments until their
// kernels ran. The byte check is against the same copies done on the host. A copy that faults
// on the GPU is reported with the stream's error — not waited for forever — whether flushes end
// with completion words (issued on the calling thread or by the launcher thread) or with events (in
// a child process: the fault ends its CUDA context), and a flush whose launch fails after a fault
// does not make the faulted flush before it read as done. The pinned-room rounds run all three
// ways. Under the default options, small flushes behind a large one on the launcher thread do not
// overtake it on their stream.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <span>
#include <vector>

#include "device_support.h"
#include "gpu/cuda_copy_engine.h"

namespace fabric_lib::device_tests {
namespace {

constexpr size_t kBytes = 8 << 20;

// How flushes are issued and end: completion words issued on the calling thread, completion
// words with every flush handed to the launcher thread, events (issued on the calling thread).
enum class Issue { kWordsInline, kWordsLauncher, kEvents };
constexpr Issue kIssueWays[] = {Issue::kWordsInline, Issue::kWordsLauncher, Issue::kEvents};
const char* name_of(Issue i) {
  return i == Issue::kWordsInline ? "words, inline" : i == Issue::kWordsLauncher ? "words, launcher thread" : "events";
}

// A GPU-to-GPU copy on device 0: `length` bytes from `src` to `dst`, or, with `segments`, a
// gather of `length`-byte pieces at those offsets.
gpu::CopyRequest device_copy(uint64_t op, const void* src, void* dst, uint64_t length,
                             std::span<const gpu::CopySegment> segments = {}) {
  gpu::CopyRequest r;
  r.op = op;
  r.src = src;
  r.src_kind = MemoryKind::kCuda;
  r.src_device = 0;
  r.length = length;
  r.dst_ptr = dst;
  r.dst_kind = MemoryKind::kCuda;
  r.dst_device = 0;
  r.segments = segments;
  return r;
}

class CopyEngineKernel : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(src_.ptr, nullptr);
    ASSERT_NE(dst_.ptr, nullptr);
    host_src_.resize(kBytes);
    std::mt19937_64 rng(11);
    for (auto& b : host_src_) b = static_cast<uint8_t>(rng());
    host_dst_.assign(kBytes, 0x5a);
    ASSERT_EQ(cudaMemcpy(src_.ptr, host_src_.data(), kBytes, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dst_.ptr, host_dst_.data(), kBytes, cudaMemcpyHostToDevice), cudaSuccess);
  }

  // The target back to its initial bytes (between runs of the same copies in other kernel shapes,
  // so that a copy the second shape leaves out shows).
  void clear_target() {
    host_dst_.assign(kBytes, 0x5a);
    ASSERT_EQ(cudaMemcpy(dst_.ptr, host_dst_.data(), kBytes, cudaMemcpyHostToDevice), cudaSuccess);
  }

  gpu::CopyRequest request(uint64_t op, uint64_t src_offset, uint64_t dst_offset, uint64_t length) const {
    return device_copy(op, src_.bytes() + src_offset, dst_.bytes() + dst_offset, length);
  }
  // What the copy does, on the host copy of the target.
  void expect_copy(const gpu::CopyRequest& r) {
    const auto* s = static_cast<const uint8_t*>(r.src);
    auto* d = static_cast<uint8_t*>(r.dst_ptr);
    const uint64_t so = s - src_.bytes(), dof = d - dst_.bytes();
    for (uint64_t i = 0; i < gpu::segment_count(r); ++i) {  // each segment, page pair, or the plain copy
      const gpu::CopySegment g = gpu::copy_offsets(r, i);
      std::memcpy(host_dst_.data() + dof + g.dst_offset, host_src_.data() + so + g.src_offset, r.length);
    }
  }
  // Progresses `engine` once: every copy it reports must be ok and reported once (into `seen`).
  static void reap(gpu::CudaCopyEngine& engine, std::set<uint64_t>& seen) {
    std::vector<gpu::CopyDone> done;
    engine.progress(done);
    for (const gpu::CopyDone& d : done) {
      EXPECT_TRUE(d.status.ok()) << "op " << d.op << ": " << d.status.to_string();
      EXPECT_TRUE(seen.insert(d.op).second) << "op " << d.op << " reported twice";
    }
  }
  // Reaps until `count` copies were reported (20 s at most); then nothing may be in flight.
  static void wait_for(gpu::CudaCopyEngine& engine, std::set<uint64_t>& seen, size_t count) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (seen.size() < count && std::chrono::steady_clock::now() < deadline) reap(engine, seen);
    ASSERT_EQ(seen.size(), count) << "copies not reported within 20 s";
    EXPECT_EQ(engine.inflight(), 0u);
  }
  // Every byte of `target` (device memory) against `model`; `unit`: the bytes a failure names a slot of.
  static void expect_bytes(const void* target, const std::vector<uint8_t>& model, uint64_t unit = 0) {
    std::vector<uint8_t> got(model.size());
    ASSERT_EQ(cudaMemcpy(got.data(), target, got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    for (size_t i = 0; i < got.size(); ++i) {
      if (got[i] != model[i]) {
        ADD_FAILURE() << "first wrong byte at " << i << (unit ? " (slot " + std::to_string(i / unit) + ")" : "") << ": "
                      << int(got[i]) << " instead of " << int(model[i]);
        return;
      }
    }
  }
  // Submits every request (one flush: nothing is progressed in between), waits for all, checks.
  void run(gpu::CudaCopyEngine& engine, const std::vector<gpu::CopyRequest>& requests) {
    for (const gpu::CopyRequest& r : requests) {
      Status error;
      ASSERT_EQ(engine.submit(r, &error), gpu::CopySubmit::kAccepted) << error.to_string();
      expect_copy(r);
    }
    std::set<uint64_t> seen;
    wait_for(engine, seen, requests.size());
    if (HasFatalFailure()) return;
    expect_bytes(dst_.ptr, host_dst_);
  }

  // 12 rounds of gathers in pinned room (and from the caller's memory, and plain copies), many
  // flushes in flight; every byte of a 256 MiB target checked.
  void pinned_room_rounds(Issue issue);

  DeviceBuffer src_{kBytes}, dst_{kBytes};
  std::vector<uint8_t> host_src_, host_dst_;
};

gpu::CudaCopyEngine::Options kernel_mode(Issue issue = Issue::kWordsLauncher) {
  gpu::CudaCopyEngine::Options o;
  o.mode = gpu::GpuCopyMode::kKernel;
  o.completion_words = issue != Issue::kEvents;
  o.launcher_copies = issue == Issue::kWordsLauncher ? 1 : 0;  // every flush to the launcher, or none
  return o;
}

// The page-copy kernel's shapes: 16 KiB pieces with 4 loads in flight per lane and with 8 (the
// default since 2026-12-05), and the smallest pieces (2 KiB: every flush has fewer warps than asked for) with 8 (a
// 2 KiB piece is too short for one round of 8: the single-load tail moves it) and with 4.
struct KernelShape {
  size_t min_launch_warps;
  uint32_t loads_per_lane;
};
constexpr KernelShape kKernelShapes[] = {{0, 4}, {0, 8}, {size_t{1} << 30, 8}, {size_t{1} << 30, 4}};

gpu::CudaCopyEngine::Options kernel_mode(KernelShape shape) {
  gpu::CudaCopyEngine::Options o = kernel_mode();
  o.min_launch_warps = shape.min_launch_warps;
  o.loads_per_lane = shape.loads_per_lane;
  return o;
}

// In the child: a gather whose one page lands far outside any allocation, behind a good one in
// the same flush. Exits 0 when both are reported with an error within 20 s, 3 when one is
// reported ok, 4 when they are not reported in time, 5 when the set-up fails.
[[noreturn]] void fault_one_copy(Issue issue) {
  DeviceBuffer src(1 << 20), dst(1 << 20);
  gpu::CudaCopyEngine engine(kernel_mode(issue));
  if (!src.ptr || !dst.ptr || !engine.prepare(0).ok()) std::exit(5);
  auto gather = [&](uint64_t op, uint64_t dst_offset) {
    static gpu::CopySegment segments[2][1];
    segments[op - 1][0] = {0, dst_offset};
    return device_copy(op, src.ptr, dst.ptr, 4096, segments[op - 1]);
  };
  Status error;
  if (engine.submit(gather(1, 0), &error) != gpu::CopySubmit::kAccepted) std::exit(5);
  if (engine.submit(gather(2, uint64_t{1} << 46), &error) != gpu::CopySubmit::kAccepted) std::exit(5);
  size_t failed = 0;
  std::vector<gpu::CopyDone> done;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (failed < 2 && std::chrono::steady_clock::now() < deadline) {
    done.clear();
    engine.progress(done);
    for (const gpu::CopyDone& d : done) {
      if (d.status.ok()) std::exit(3);
      ++failed;
    }
  }
  std::exit(failed == 2 ? 0 : 4);
}

// In the child, on one stream: a faulting gather in one flush, then — once the fault has
// happened (the device synchronized), before the engine asked the stream — a good gather in the
// next flush, whose launch now fails at once. Neither may be reported ok: the failed launch must
// not make the faulted flush before it look complete. Exit codes as above.
[[noreturn]] void fault_then_a_good_flush(Issue issue) {
  DeviceBuffer src(1 << 20), dst(1 << 20);
  gpu::CudaCopyEngine::Options o = kernel_mode(issue);
  o.streams_per_device = 1;
  gpu::CudaCopyEngine engine(o);
  if (!src.ptr || !dst.ptr || !engine.prepare(0).ok()) std::exit(5);
  static gpu::CopySegment segments[2][1] = {{{0, uint64_t{1} << 46}}, {{0, 0}}};
  auto gather = [&](uint64_t op) { return device_copy(op, src.ptr, dst.ptr, 4096, segments[op - 1]); };
  Status error;
  std::vector<gpu::CopyDone> done;
  size_t failed = 0;
  auto count = [&] {
    for (const gpu::CopyDone& d : done) {
      if (d.status.ok()) std::exit(3);
      ++failed;
    }
    done.clear();
  };
  if (engine.submit(gather(1), &error) != gpu::CopySubmit::kAccepted) std::exit(5);
  engine.progress(done);  // flush 1: the faulting kernel
  count();
  // The fault happened (asked until it shows: the launcher thread may still be launching it).
  const auto fault_by = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (cudaDeviceSynchronize() == cudaSuccess) {
    if (std::chrono::steady_clock::now() > fault_by) std::exit(5);
  }
  if (engine.submit(gather(2), &error) != gpu::CopySubmit::kAccepted) std::exit(5);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (failed < 2 && std::chrono::steady_clock::now() < deadline) {
    engine.progress(done);  // the first call flushes 2
    count();
  }
  std::exit(failed == 2 ? 0 : 4);
}

TEST(CopyEngineFault, AFaultingCopyIsReportedWithTheStreamsErrorWithCompletionWordsAndWithEvents) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the child starts its own CUDA context
  for (const Issue issue : kIssueWays) {
    EXPECT_EXIT(fault_one_copy(issue), ::testing::ExitedWithCode(0), "") << name_of(issue);
    EXPECT_EXIT(fault_then_a_good_flush(issue), ::testing::ExitedWithCode(0), "") << name_of(issue) << ", then a good flush";
  }
}

// The default split, on one stream: a large flush goes to the launcher thread, and the small
// flushes right behind it must not overtake it (while the launcher is busy they are handed over
// too; issued here, their completion word could be written before the large kernel ran, and the
// large flush would read as done). Every request's bytes are checked the moment it is reported.
TEST(CopyEngineLauncher, SmallFlushesBehindALargeOneDoNotOvertakeIt) {
  constexpr size_t kPage = 16384, kPages = 4096, kBuf = kPage * kPages;  // 64 MiB each side
  constexpr size_t kSmall = 8, kSmallBytes = 4096;  // small ops 1..kSmall
  constexpr uint64_t kLargeOp = 100;
  DeviceBuffer src(kBuf), dst(kBuf), small_dst(kSmall * kSmallBytes);
  ASSERT_NE(src.ptr, nullptr);
  ASSERT_NE(dst.ptr, nullptr);
  ASSERT_NE(small_dst.ptr, nullptr);
  gpu::CudaCopyEngine::Options o;  // the defaults: kAuto, completion words, launcher from 2048 copies (4096 below)
  o.streams_per_device = 1;
  gpu::CudaCopyEngine engine(o);
  ASSERT_TRUE(engine.prepare(0).ok());
  std::vector<gpu::CopySegment> pages(kPages);
  for (size_t i = 0; i < kPages; ++i) pages[i] = {i * kPage, (kPages - 1 - i) * kPage};
  std::vector<uint8_t> got(kBuf);
  for (int round = 0; round < 20; ++round) {
    const auto value = static_cast<uint8_t>(round + 1);
    ASSERT_EQ(cudaMemset(src.ptr, value, kBuf), cudaSuccess);
    ASSERT_EQ(cudaMemset(dst.ptr, 0, kBuf), cudaSuccess);
    ASSERT_EQ(cudaMemset(small_dst.ptr, 0, kSmall * kSmallBytes), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    auto copy = [&](uint64_t op, void* to, uint64_t length) { return device_copy(op, src.ptr, to, length); };
    // Whether a reported request's bytes are in place now.
    auto landed = [&](uint64_t op) {
      const size_t n = op == kLargeOp ? kBuf : kSmallBytes;
      void* from = op == kLargeOp ? dst.ptr : small_dst.bytes() + (op - 1) * kSmallBytes;
      if (cudaMemcpy(got.data(), from, n, cudaMemcpyDeviceToHost) != cudaSuccess) return false;
      return std::all_of(got.begin(), got.begin() + n, [&](uint8_t b) { return b == value; });
    };
    std::vector<gpu::CopyDone> done;
    std::set<uint64_t> seen;
    auto check = [&] {
      for (const gpu::CopyDone& d : done) {
        ASSERT_TRUE(d.status.ok()) << "op " << d.op << ": " << d.status.to_string();
        ASSERT_TRUE(seen.insert(d.op).second) << "op " << d.op << " reported twice";
        ASSERT_TRUE(landed(d.op)) << "round " << round << ": op " << d.op << " reported before its bytes landed";
      }
      done.clear();
    };
    gpu::CopyRequest large = copy(kLargeOp, dst.ptr, kPage);
    large.segments = pages;
    Status error;
    ASSERT_EQ(engine.submit(large, &error), gpu::CopySubmit::kAccepted) << error.to_string();
    engine.progress(done);  // the large flush: to the launcher
    check();
    for (uint64_t k = 1; k <= kSmall; ++k) {
      ASSERT_EQ(engine.submit(copy(k, small_dst.bytes() + (k - 1) * kSmallBytes, kSmallBytes), &error),
                gpu::CopySubmit::kAccepted);
      engine.progress(done);  // a small flush of its own
      check();
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (seen.size() < kSmall + 1 && std::chrono::steady_clock::now() < deadline) {
      engine.progress(done);
      check();
    }
    ASSERT_EQ(seen.size(), kSmall + 1) << "round " << round << ": copies not reported within 20 s";
  }
}

// Gathers of 4 KiB pages, of 40 KiB (three pieces, the last partial) and of 4097 bytes at odd
// offsets (the byte-wise path), in one flush with each other.
TEST_F(CopyEngineKernel, GathersOfWholePartialAndUnalignedPiecesMoveTheirBytes) {
  for (const KernelShape shape : kKernelShapes) {
    SCOPED_TRACE(::testing::Message() << "min warps " << shape.min_launch_warps << ", loads " << shape.loads_per_lane);
    clear_target();
    gpu::CudaCopyEngine engine(kernel_mode(shape));
    ASSERT_TRUE(engine.prepare(0).ok());
    std::vector<std::vector<gpu::CopySegment>> segments(3);
    std::vector<gpu::CopyRequest> requests;
    // 512 pages of 4 KiB from the first MiB... reversed into the second and third MiB.
    for (uint64_t i = 0; i < 512; ++i) segments[0].push_back({(i * 7 % 256) * 4096, (511 - i) * 4096});
    requests.push_back(request(1, 0, 1 << 20, 4096));
    // 20 copies of 40 KiB, strided by 48 KiB at both ends.
    for (uint64_t i = 0; i < 20; ++i) segments[1].push_back({i * 48 * 1024, (19 - i) * 48 * 1024});
    requests.push_back(request(2, 3 << 20, 4 << 20, 40 * 1024));
    // 30 copies of 4097 bytes at offsets that are not multiples of 16.
    for (uint64_t i = 0; i < 30; ++i) segments[2].push_back({i * 5003 + 3, i * 4099 + 1});
    requests.push_back(request(3, 6 << 20, 6 << 20, 4097));
    for (size_t k = 0; k < 3; ++k) requests[k].segments = segments[k];
    run(engine, requests);
    if (HasFailure()) return;
  }
}

// Gathers by page pairs (a paged write's form: indices the kernel scales by the strides) of 4 KiB
// pages, of 40 KiB (three pieces, the last partial) on strides of 48 and 44 KiB, and of 4097 bytes
// on odd strides (the byte-wise path), in one flush with a gather of offset pairs and a plain copy:
// in every kernel shape, and through one cudaMemcpyAsync per page (memcpy mode) and one batched
// call (batch mode), which read the pairs on the host.
TEST_F(CopyEngineKernel, GathersByPagePairsMoveTheirBytesInEveryModeAndShape) {
  std::vector<gpu::CudaCopyEngine::Options> modes;
  for (const KernelShape shape : kKernelShapes) modes.push_back(kernel_mode(shape));
  for (const gpu::GpuCopyMode mode : {gpu::GpuCopyMode::kMemcpy, gpu::GpuCopyMode::kBatch}) {
    modes.push_back(kernel_mode());
    modes.back().mode = mode;
  }
  for (const gpu::CudaCopyEngine::Options& o : modes) {
    SCOPED_TRACE(::testing::Message() << gpu::gpu_copy_mode_name(o.mode) << ", min warps " << o.min_launch_warps << ", loads "
                                      << o.loads_per_lane);
    clear_target();
    gpu::CudaCopyEngine engine(o);
    ASSERT_TRUE(engine.prepare(0).ok());
    std::vector<std::vector<gpu::CopyPagePair>> pages(3);
    std::vector<gpu::CopyRequest> requests;
    // 512 pages of 4 KiB from the first MiB (each read twice), reversed into the second and third.
    for (uint32_t i = 0; i < 512; ++i) pages[0].push_back({i * 7 % 256, 511 - i});
    requests.push_back(request(1, 0, 1 << 20, 4096));
    requests.back().src_stride = requests.back().dst_stride = 4096;
    // 20 copies of 40 KiB, on 48 KiB strides at the source and 44 KiB at the target.
    for (uint32_t i = 0; i < 20; ++i) pages[1].push_back({i, 19 - i});
    requests.push_back(request(2, 3 << 20, 4 << 20, 40 * 1024));
    requests.back().src_stride = 48 * 1024;
    requests.back().dst_stride = 44 * 1024;
    // 30 copies of 4097 bytes on strides that are not multiples of 16, from odd bases.
    for (uint32_t i = 0; i < 30; ++i) pages[2].push_back({i, (i * 11) % 30});
    requests.push_back(request(3, (6 << 20) + 3, (6 << 20) + 1, 4097));
    requests.back().src_stride = 5003;
    requests.back().dst_stride = 4099;
    for (size_t k = 0; k < 3; ++k) requests[k].pages = pages[k];
    std::vector<gpu::CopySegment> offsets;
    for (uint64_t i = 0; i < 16; ++i) offsets.push_back({i * 8192, i * 4096});
    requests.push_back(request(4, 5 << 20, 7 << 20, 4096));
    requests.back().segments = offsets;
    requests.push_back(request(5, 7 << 20, (7 << 20) + (64 << 10), 12345));
    run(engine, requests);
    if (HasFailure()) return;
  }
}

// 200 plain copies whose lengths change every copy (a kernel run each: more than one launch's
// kMaxPageCopyRuns), then 300 of one length (one shared run), interleaved with a gather.
TEST_F(CopyEngineKernel, PlainCopiesOfManyLengthsAndOneLengthMoveTheirBytes) {
  for (const KernelShape shape : kKernelShapes) {
    SCOPED_TRACE(::testing::Message() << "min warps " << shape.min_launch_warps << ", loads " << shape.loads_per_lane);
    clear_target();
    gpu::CudaCopyEngine engine(kernel_mode(shape));
    ASSERT_TRUE(engine.prepare(0).ok());
    std::vector<gpu::CopyRequest> requests;
    for (uint64_t i = 0; i < 200; ++i) {
      const uint64_t length = 1000 + (i % 3) * 4096 + i;  // 1 to 3 pieces, never 16-byte aligned ends
      requests.push_back(request(100 + i, i * 20000, kBytes - (i + 1) * 20000, length));
    }
    std::vector<gpu::CopySegment> gather;
    for (uint64_t i = 0; i < 64; ++i) gather.push_back({i * 8192, i * 4096});
    requests.push_back(request(99, 5 << 20, 0, 4096));
    requests.back().segments = gather;
    for (uint64_t i = 0; i < 300; ++i) requests.push_back(request(400 + i, i * 4096, (1 << 20) + i * 4096, 2048));
    run(engine, requests);
    if (HasFailure()) return;
  }
}

// A launch passes the kernel a parameter block of 1, 8 or kMaxPageCopyRuns runs, the smallest that
// holds its runs (launch_page_copy): flushes of 1, 2, 8, 9, 64 and 65 runs (plain copies of
// distinct lengths, a run each) cross every boundary, and each moves its bytes.
TEST_F(CopyEngineKernel, LaunchesOfEveryParameterBlockSizeMoveTheirBytes) {
  uint64_t op = 1;
  for (const uint64_t runs : {1, 2, 8, 9, 64, 65}) {
    SCOPED_TRACE(::testing::Message() << runs << " runs");
    clear_target();
    gpu::CudaCopyEngine engine(kernel_mode());
    ASSERT_TRUE(engine.prepare(0).ok());
    std::vector<gpu::CopyRequest> requests;
    for (uint64_t i = 0; i < runs; ++i, ++op) {
      requests.push_back(request(op, i * 20000, kBytes - (i + 1) * 20000, 3000 + i * 17));
    }
    run(engine, requests);
    if (HasFailure()) return;
  }
}

// Several launches of one flush on one stream (200 copies of changing lengths: a kernel run each,
// four launches), flush after flush without waiting in between, so the launcher thread still
// holds earlier flushes' launches while later ones are built: each keeps its own parameters (they
// live in their flush's record, not in the ops; the record is reused only once it retired).
TEST_F(CopyEngineKernel, LaunchesOfFlushesQueuedOnOneStreamKeepTheirParameters) {
  for (const Issue issue : kIssueWays) {
    SCOPED_TRACE(name_of(issue));
    clear_target();
    gpu::CudaCopyEngine::Options o = kernel_mode(issue);
    o.streams_per_device = 1;
    gpu::CudaCopyEngine engine(o);
    ASSERT_TRUE(engine.prepare(0).ok());
    constexpr uint64_t kRounds = 3, kCopies = 200, kStride = 9400;  // lengths < kStride: no overlap
    std::set<uint64_t> seen;
    for (uint64_t round = 0; round < kRounds; ++round) {
      for (uint64_t i = 0; i < kCopies; ++i) {
        const uint64_t n = round * kCopies + i;
        const uint64_t length = 1000 + ((i + round) % 3) * 4096 + i;
        const gpu::CopyRequest r = request(n + 1, i * kStride, n * kStride, length);
        Status error;
        ASSERT_EQ(engine.submit(r, &error), gpu::CopySubmit::kAccepted) << error.to_string();
        expect_copy(r);
      }
      reap(engine, seen);  // this round's flush: its four launches join what is still queued
    }
    wait_for(engine, seen, kRounds * kCopies);
    if (HasFatalFailure()) return;
    expect_bytes(dst_.ptr, host_dst_);
    if (HasFailure()) return;
  }
}

// A loads-per-lane count the kernel was not compiled for (the builder refuses it; Options do not)
// fails the flush's copies with cudaErrorInvalidValue and moves no byte — with the launcher thread
// and without it — instead of running as another shape.
TEST_F(CopyEngineKernel, AnUnsupportedLoadsPerLaneFailsTheCopiesAndMovesNothing) {
  for (const Issue issue : {Issue::kWordsLauncher, Issue::kWordsInline}) {
    for (const uint32_t loads : {0u, 5u, 16u}) {
      SCOPED_TRACE(::testing::Message() << "loads " << loads << ", " << name_of(issue));
      gpu::CudaCopyEngine::Options o = kernel_mode(issue);
      o.loads_per_lane = loads;
      gpu::CudaCopyEngine engine(o);
      ASSERT_TRUE(engine.prepare(0).ok());
      std::vector<gpu::CopySegment> pages;
      for (uint64_t i = 0; i < 16; ++i) pages.push_back({i * 4096, (15 - i) * 4096});
      gpu::CopyRequest gather = request(1, 0, 0, 4096);
      gather.segments = pages;
      Status error;
      ASSERT_EQ(engine.submit(gather, &error), gpu::CopySubmit::kAccepted) << error.to_string();
      ASSERT_EQ(engine.submit(request(2, 1 << 20, 1 << 20, 8192), &error), gpu::CopySubmit::kAccepted);
      std::set<uint64_t> failed;
      std::vector<gpu::CopyDone> done;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (failed.size() < 2 && std::chrono::steady_clock::now() < deadline) {
        done.clear();
        engine.progress(done);
        for (const gpu::CopyDone& d : done) {
          EXPECT_FALSE(d.status.ok()) << "op " << d.op << " reported ok";
          EXPECT_EQ(d.status.code(), ErrorCode::kInvalidArgument) << d.status.to_string();  // cudaErrorInvalidValue
          EXPECT_TRUE(failed.insert(d.op).second) << "op " << d.op << " reported twice";
        }
      }
      ASSERT_EQ(failed.size(), 2u) << "copies not reported within 20 s";
      std::vector<uint8_t> got(kBytes);
      ASSERT_EQ(cudaMemcpy(got.data(), dst_.ptr, kBytes, cudaMemcpyDeviceToHost), cudaSuccess);
      ASSERT_TRUE(std::all_of(got.begin(), got.end(), [](uint8_t b) { return b == 0x5a; })) << "a byte moved";
    }
  }
}

// Gathers written straight into the engine's pinned room (as the ipc domain writes a paged
// write's page pairs and other gathers' segments), mixed with a gather from the caller's memory and a plain copy, 12 flushes
// in flight before any is waited for: each flush's room spans two pinned buffers, and buffers
// come back for reuse only when every launch that reads them has run — a buffer reused early
// would send pages to the wrong places. Every target slot is written once, so the bytes do not
// depend on the order in which the flushes run. A room handed out and not submitted is handed
// out again.
TEST_F(CopyEngineKernel, GathersWrittenIntoThePinnedRoomKeepItUntilTheirKernelsRan) {
  for (const Issue issue : kIssueWays) {
    SCOPED_TRACE(name_of(issue));
    pinned_room_rounds(issue);
    if (HasFatalFailure()) return;
  }
}

void CopyEngineKernel::pinned_room_rounds(Issue issue) {
  constexpr uint64_t kPage = 4096, kTargetBytes = 256 << 20, kSlots = kTargetBytes / kPage;
  DeviceBuffer target(kTargetBytes);
  ASSERT_NE(target.ptr, nullptr);
  ASSERT_EQ(cudaMemset(target.ptr, 0, kTargetBytes), cudaSuccess);
  std::vector<uint8_t> model(kTargetBytes, 0);
  gpu::CudaCopyEngine engine(kernel_mode(issue));
  ASSERT_TRUE(engine.prepare(0).ok());
  std::mt19937_64 rng(23);
  std::vector<uint64_t> slots(kSlots);  // target slots in a random order, each used once
  for (uint64_t i = 0; i < kSlots; ++i) slots[i] = i;
  std::shuffle(slots.begin(), slots.end(), rng);
  uint64_t next_slot = 0, next_op = 1, submitted = 0;
  std::set<uint64_t> seen;
  auto gather = [&] {
    gpu::CopyRequest r = request(next_op++, 0, 0, kPage);
    r.dst_ptr = target.ptr;
    return r;
  };
  auto model_of = [&](std::span<const gpu::CopySegment> segments) {
    for (const gpu::CopySegment& g : segments) {
      std::memcpy(model.data() + g.dst_offset, host_src_.data() + g.src_offset, kPage);
    }
  };
  auto random_segments = [&](uint64_t pages) {
    std::vector<gpu::CopySegment> v(pages);
    for (gpu::CopySegment& g : v) g = {(rng() % (kBytes / kPage)) * kPage, slots[next_slot++] * kPage};
    return v;
  };
  // Made beforehand, so that the rounds are submitted faster than their kernels run and the
  // flushes really are in flight together.
  const std::vector<uint64_t> sizes = {1500, 3000, 600};
  std::vector<std::vector<gpu::CopySegment>> planned;
  for (int round = 0; round < 12; ++round) {
    for (const uint64_t pages : sizes) planned.push_back(random_segments(pages));
    planned.push_back(random_segments(100));
  }
  size_t next_plan = 0;
  for (int round = 0; round < 12; ++round) {
    for (const uint64_t pages : sizes) {
      const std::vector<gpu::CopySegment>& plan = planned[next_plan++];
      gpu::CopyRequest r = gather();
      if (pages == 3000) {
        // As page pairs (the ipc domain's paged writes), in the same room: page indices.
        const std::span<gpu::CopyPagePair> unused = engine.page_room(100);
        const std::span<gpu::CopyPagePair> room = engine.page_room(pages);
        ASSERT_GE(room.size(), pages) << "no pinned room";
        if (unused.size() >= pages) {
          EXPECT_EQ(room.data(), unused.data()) << "a room not submitted is handed out again";
        }
        for (uint64_t i = 0; i < pages; ++i) {
          room[i] = {static_cast<uint32_t>(plan[i].src_offset / kPage), static_cast<uint32_t>(plan[i].dst_offset / kPage)};
        }
        r.pages = room.first(pages);
        r.src_stride = r.dst_stride = kPage;
      } else {
        const std::span<gpu::CopySegment> unused = engine.segment_room(100);
        const std::span<gpu::CopySegment> room = engine.segment_room(pages);
        ASSERT_GE(room.size(), pages) << "no pinned room";
        if (unused.size() >= pages) {
          EXPECT_EQ(room.data(), unused.data()) << "a room not submitted is handed out again";
        }
        std::memcpy(room.data(), plan.data(), pages * sizeof(gpu::CopySegment));
        r.segments = room.first(pages);
      }
      Status error;
      ASSERT_EQ(engine.submit(r, &error), gpu::CopySubmit::kAccepted) << error.to_string();
      ++submitted;
    }
    // A gather from the caller's own memory (the engine copies it into its room), changed as
    // soon as it is submitted; and a plain copy.
    std::vector<gpu::CopySegment> own = planned[next_plan++];
    gpu::CopyRequest r = gather();
    r.segments = own;
    Status error;
    ASSERT_EQ(engine.submit(r, &error), gpu::CopySubmit::kAccepted) << error.to_string();
    for (gpu::CopySegment& g : own) g = {0, 0};
    gpu::CopyRequest plain = request(next_op++, (round * 7 % (kBytes / kPage)) * kPage, 0, kPage);
    const uint64_t plain_slot = slots[next_slot++];
    plain.dst_ptr = target.bytes() + plain_slot * kPage;
    std::memcpy(model.data() + plain_slot * kPage, host_src_.data() + round * 7 % (kBytes / kPage) * kPage, kPage);
    ASSERT_EQ(engine.submit(plain, &error), gpu::CopySubmit::kAccepted) << error.to_string();
    submitted += 2;
    reap(engine, seen);  // flushes this round; waits for nothing
  }
  for (const std::vector<gpu::CopySegment>& plan : planned) model_of(plan);
  ASSERT_LE(next_slot, kSlots);
  wait_for(engine, seen, submitted);
  if (HasFatalFailure()) return;
  expect_bytes(target.ptr, model, kPage);
}

}  // namespace
}  // namespace fabric_lib::device_tests

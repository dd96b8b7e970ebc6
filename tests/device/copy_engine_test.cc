// The CUDA copy engine's page-copy kernel, driven directly (no transport): flushes that mix gather
// requests and plain copies of several lengths — whole and partial 16 KiB pieces, unaligned ends,
// more kernel runs than one launch carries — move exactly the bytes asked, report every request
// once and ok, and touch nothing else. The byte check is against the same copies done on the host.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "device_support.h"
#include "gpu/cuda_copy_engine.h"

namespace fabric_lib::device_tests {
namespace {

constexpr size_t kBytes = 8 << 20;

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

  gpu::CopyRequest request(uint64_t op, uint64_t src_offset, uint64_t dst_offset, uint64_t length) const {
    gpu::CopyRequest r;
    r.op = op;
    r.src = src_.bytes() + src_offset;
    r.src_kind = MemoryKind::kCuda;
    r.src_device = 0;
    r.length = length;
    r.dst_ptr = dst_.bytes() + dst_offset;
    r.dst_kind = MemoryKind::kCuda;
    r.dst_device = 0;
    return r;
  }
  // What the copy does, on the host copy of the target.
  void expect_copy(const gpu::CopyRequest& r) {
    const auto* s = static_cast<const uint8_t*>(r.src);
    auto* d = static_cast<uint8_t*>(r.dst_ptr);
    const uint64_t so = s - src_.bytes(), dof = d - dst_.bytes();
    if (r.segments.empty()) {
      std::memcpy(host_dst_.data() + dof, host_src_.data() + so, r.length);
      return;
    }
    for (const gpu::CopySegment& g : r.segments) {
      std::memcpy(host_dst_.data() + dof + g.dst_offset, host_src_.data() + so + g.src_offset, r.length);
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
    std::vector<gpu::CopyDone> done;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (seen.size() < requests.size() && std::chrono::steady_clock::now() < deadline) {
      done.clear();
      engine.progress(done);
      for (const gpu::CopyDone& d : done) {
        EXPECT_TRUE(d.status.ok()) << "op " << d.op << ": " << d.status.to_string();
        EXPECT_TRUE(seen.insert(d.op).second) << "op " << d.op << " reported twice";
      }
    }
    ASSERT_EQ(seen.size(), requests.size()) << "copies not reported within 20 s";
    EXPECT_EQ(engine.inflight(), 0u);
    std::vector<uint8_t> got(kBytes);
    ASSERT_EQ(cudaMemcpy(got.data(), dst_.ptr, kBytes, cudaMemcpyDeviceToHost), cudaSuccess);
    for (size_t i = 0; i < kBytes; ++i) {
      if (got[i] != host_dst_[i]) {
        ADD_FAILURE() << "first wrong byte at " << i << ": " << int(got[i]) << " instead of " << int(host_dst_[i]);
        return;
      }
    }
  }

  DeviceBuffer src_{kBytes}, dst_{kBytes};
  std::vector<uint8_t> host_src_, host_dst_;
};

gpu::CudaCopyEngine::Options kernel_mode() {
  gpu::CudaCopyEngine::Options o;
  o.mode = gpu::GpuCopyMode::kKernel;
  return o;
}

// Gathers of 4 KiB pages, of 40 KiB (three pieces, the last partial) and of 4097 bytes at odd
// offsets (the byte-wise path), in one flush with each other.
TEST_F(CopyEngineKernel, GathersOfWholePartialAndUnalignedPiecesMoveTheirBytes) {
  gpu::CudaCopyEngine engine(kernel_mode());
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
}

// 200 plain copies whose lengths change every copy (a kernel run each: more than one launch's
// kMaxPageCopyRuns), then 300 of one length (one shared run), interleaved with a gather.
TEST_F(CopyEngineKernel, PlainCopiesOfManyLengthsAndOneLengthMoveTheirBytes) {
  gpu::CudaCopyEngine engine(kernel_mode());
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
}

}  // namespace
}  // namespace fabric_lib::device_tests

// GPU memory registration on the GPU machine: the kind is detected; GPU memory is a source of
// writes over tcp and shm through staging (Debian's libfabric has no CUDA support: shm reports
// FI_HMEM but refuses CUDA registrations, tcp has no FI_HMEM), with every byte checked at a host
// target in a peer process; a GPU remote target is refused with the alternatives named.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "common/pattern.h"
#include "device_support.h"
#include "kernels.h"

namespace fabric_lib::device_tests {

std::string device_hash_hex(const void* device_ptr, size_t n) {
  std::vector<uint8_t> host(n);
  if (n && cudaMemcpy(host.data(), device_ptr, n, cudaMemcpyDeviceToHost) != cudaSuccess) return "<cudaMemcpy failed>";
  return testing::hash_hex(host.data(), n);
}

namespace {

using namespace std::chrono_literals;

TEST(GpuMemory, KindIsDetected) {
  auto engine = build_engine(TransferEngineBuilder().provider("tcp").interfaces({"lo"}));
  ASSERT_TRUE(engine);
  DeviceBuffer gpu(1 << 20);
  ASSERT_NE(gpu.ptr, nullptr);
  Result<MrRegistration> g = engine->register_memory(gpu.ptr, gpu.size, Access::kLocalOnly, MemoryKind::kAuto);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_EQ(g->desc.memory_kind(), MemoryKind::kCuda);

  std::vector<uint8_t> pageable(1 << 20);
  Result<MrRegistration> h = engine->register_memory(pageable.data(), pageable.size(), Access::kRemoteWrite, MemoryKind::kAuto);
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  EXPECT_EQ(h->desc.memory_kind(), MemoryKind::kHost);

  MappedBuffer pinned(1 << 20);
  Result<MrRegistration> p = engine->register_memory(pinned.host(), pinned.size, Access::kRemoteWrite, MemoryKind::kAuto);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->desc.memory_kind(), MemoryKind::kHost);

  // Claims that do not hold are refused before any provider sees them.
  Result<MrRegistration> wrong = engine->register_memory(pageable.data(), pageable.size(), Access::kLocalOnly, MemoryKind::kCuda);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), ErrorCode::kInvalidArgument) << wrong.status().to_string();
  Result<MrRegistration> overrun = engine->register_memory(gpu.ptr, gpu.size + (64 << 20), Access::kLocalOnly, MemoryKind::kCuda);
  EXPECT_FALSE(overrun.ok());
  void* managed = nullptr;
  FL_CUDA_ASSERT(cudaMallocManaged(&managed, 1 << 20));
  Result<MrRegistration> m = engine->register_memory(managed, 1 << 20, Access::kLocalOnly, MemoryKind::kAuto);
  EXPECT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), ErrorCode::kInvalidArgument) << m.status().to_string();
  cudaFree(managed);
}

class GpuMemoryOn : public ::testing::TestWithParam<std::pair<std::string, size_t>> {
 protected:
  testing::ProviderConfig config() const { return provider_config(GetParam().first, GetParam().second); }
};

TEST_P(GpuMemoryOn, GpuRemoteTargetIsRefusedWithTheAlternatives) {
  auto engine = build_engine(config().builder());
  ASSERT_TRUE(engine);
  DeviceBuffer gpu(1 << 20);
  Result<MrRegistration> r = engine->register_memory(gpu.ptr, gpu.size, Access::kRemoteWrite, MemoryKind::kCuda);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kUnsupported);
  const std::string m = r.status().message();
  EXPECT_NE(m.find("HMEM-capable provider"), std::string::npos) << m;
  EXPECT_NE(m.find("same-host IPC backend"), std::string::npos) << m;
  EXPECT_NE(m.find("kLocalOnly"), std::string::npos) << m;
  std::printf("[ info ] %s: %s\n", GetParam().first.c_str(), m.c_str());
}

TEST_P(GpuMemoryOn, StagedWritesFromGpuReachAHostTargetByteForByte) {
  const testing::ProviderConfig cfg = config();
  constexpr uint64_t kRegion = 32 << 20;
  auto engine = build_engine(cfg.builder());
  ASSERT_TRUE(engine);
  testing::AgentProcess agent(cfg, kRegion);
  ASSERT_TRUE(agent.started());
  DeviceBuffer gpu(kRegion);
  ASSERT_NE(gpu.ptr, nullptr);
  FL_KERNEL_ASSERT(launch_fill_pattern(gpu.bytes(), kRegion, 77, nullptr));
  FL_CUDA_ASSERT(cudaDeviceSynchronize());  // the engine copies on its own stream: data must be ready
  Result<MrRegistration> src = engine->register_memory(gpu.ptr, kRegion, Access::kLocalOnly, MemoryKind::kCuda);
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  EXPECT_EQ(src->desc.memory_kind(), MemoryKind::kCuda);

  // Lengths around the 1 MiB bounce chunk and the 64 KiB shard threshold; odd offsets.
  struct Case {
    uint64_t offset, length;
  };
  const std::vector<Case> cases = {{0, 1}, {4096 + 3, 4097}, {1 << 20, (1 << 20) + 5}, {3 << 20, (8 << 20) + 3}, {17 << 20, 12 << 20}};
  uint32_t imm = 100;
  for (const Case& c : cases) {
    WriteRequest w{src->handle, c.offset, agent.desc(), c.offset, c.length, imm};
    CompletionCounter done;
    ASSERT_TRUE(engine->submit_write(w, Completion::counter(done)).ok());
    ASSERT_TRUE(done.wait_for(1, 30s));
    EXPECT_EQ(done.errors.load(), 0u) << "length " << c.length;
    EXPECT_TRUE(agent.expect_imms(imm, imm_count_of(w, cfg.domains), 30s)) << "length " << c.length;
    EXPECT_EQ(agent.hash(c.offset, c.length), device_hash_hex(gpu.bytes() + c.offset, c.length)) << "length " << c.length;
    ++imm;
  }

  // Paged writes and many writes in flight at once (the bounded bounce pool says "again").
  ASSERT_EQ(agent.call("zero"), "ok");
  PagedWriteRequest paged;
  paged.src = src->handle;
  paged.dst = agent.desc();
  paged.page_length = 64 << 10;
  for (uint32_t i = 0; i < 64; ++i) {
    paged.src_pages.push_back(i);
    paged.dst_pages.push_back(63 - i);
  }
  paged.src_stride = paged.dst_stride = paged.page_length;
  paged.imm = 200;
  CompletionCounter paged_done;
  ASSERT_TRUE(engine->submit_paged_writes(paged, Completion::counter(paged_done)).ok());
  constexpr int kMany = 200;
  CompletionCounter many;
  for (int i = 0; i < kMany; ++i) {
    const uint64_t off = (uint64_t{8} << 20) + (static_cast<uint64_t>(i % 64) << 18);  // [8, 24) MiB
    WriteRequest w{src->handle, off, agent.desc(), off, 256 << 10, 201u};
    ASSERT_TRUE(engine->submit_write(w, Completion::counter(many)).ok());
  }
  ASSERT_TRUE(paged_done.wait_for(1, 30s));
  ASSERT_TRUE(many.wait_for(kMany, 60s));
  EXPECT_EQ(paged_done.errors.load() + many.errors.load(), 0u);
  EXPECT_TRUE(agent.expect_imms(200, imm_count_of(paged, cfg.domains), 30s));
  EXPECT_TRUE(agent.expect_imms(201, kMany * imm_count_of_write(256 << 10, RoundRobin{}, cfg.domains), 30s));
  for (uint32_t i = 0; i < 64; ++i) {
    EXPECT_EQ(agent.hash((63 - i) * paged.page_length, paged.page_length),
              device_hash_hex(gpu.bytes() + i * paged.page_length, paged.page_length))
        << "page " << i;
  }
  EXPECT_EQ(agent.hash(8 << 20, 16 << 20), device_hash_hex(gpu.bytes() + (8 << 20), 16 << 20));
}

INSTANTIATE_TEST_SUITE_P(Providers, GpuMemoryOn,
                         ::testing::Values(std::make_pair(std::string("tcp"), size_t{1}), std::make_pair(std::string("tcp"), size_t{2}),
                                           std::make_pair(std::string("shm"), size_t{1}), std::make_pair(std::string("shm"), size_t{2})),
                         [](const auto& info) { return info.param.first + "_" + std::to_string(info.param.second) + "dom"; });

}  // namespace
}  // namespace fabric_lib::device_tests

// GPU-visible completion flags: a kernel waits on a flag in mapped memory while the host receives
// a peer process's writes over tcp; the ImmCounter's flag sink sets it when the expected imms have
// arrived, and the kernel then reads the delivered bytes (from the same mapped target) and checks
// every one. Also: a failed expectation sets the error value, and the device's pattern function
// is the host's.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "common/pattern.h"
#include "device_support.h"
#include "kernels.h"

namespace fabric_lib::device_tests {
namespace {

using namespace std::chrono_literals;

constexpr uint64_t kFlagWaitNs = 30'000'000'000ull;

struct FlagResult {
  uint64_t outcome = 99, mismatches = 0, first_mismatch = 0;
};

FlagResult read_result(const DeviceBuffer& result) {
  FlagResult r;
  cudaMemcpy(&r, result.ptr, sizeof(r), cudaMemcpyDeviceToHost);
  return r;
}

TEST(GpuFlag, DevicePatternMatchesTheHostPattern) {
  constexpr size_t kBytes = 1 << 20;
  DeviceBuffer data(kBytes);
  ASSERT_NE(data.ptr, nullptr);
  FL_KERNEL_ASSERT(launch_fill_pattern(data.bytes(), kBytes, 42, nullptr));
  std::vector<uint8_t> host(kBytes);
  FL_CUDA_ASSERT(cudaMemcpy(host.data(), data.ptr, kBytes, cudaMemcpyDeviceToHost));
  EXPECT_EQ(tools::find_pattern_mismatch(host.data(), kBytes, 42), kBytes);
}

class GpuFlagTransfer : public ::testing::TestWithParam<size_t> {};

TEST_P(GpuFlagTransfer, KernelWaitsForTheImmsThenChecksTheDeliveredBytes) {
  const size_t domains = GetParam();
  const testing::ProviderConfig config = provider_config("tcp", domains);
  constexpr uint64_t kBytes = 8 << 20, kChunk = 256 << 10, kSeed = 1234;
  constexpr uint32_t kImm = 4242;
  auto engine = build_engine(config.builder());
  ASSERT_TRUE(engine);
  MappedBuffer target(kBytes);  // the network writes it, the kernel reads it
  ASSERT_NE(target.host(), nullptr);
  std::memset(target.host(), 0, kBytes);
  Result<MrRegistration> reg = engine->register_memory(target.host(), kBytes, Access::kRemoteWrite);
  ASSERT_TRUE(reg.ok()) << reg.status().to_string();
  Result<MappedWord> flag = alloc_mapped_word();
  ASSERT_TRUE(flag.ok()) << flag.status().to_string();

  testing::AgentProcess agent(config, kBytes);
  ASSERT_TRUE(agent.started());
  ASSERT_EQ(agent.call("fill " + std::to_string(kSeed)), "ok");
  const uint64_t writes = kBytes / kChunk;
  const uint64_t expected = writes * imm_count_of_write(kChunk, RoundRobin{}, domains);
  ASSERT_TRUE(engine->imms().expect(kImm, expected, Completion::flag(flag->host_ptr(), 1)).ok());

  cudaStream_t stream = nullptr;
  FL_CUDA_ASSERT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  DeviceBuffer result(sizeof(FlagResult));
  FL_KERNEL_ASSERT(launch_flag_then_check(flag->device_ptr(), 1, UINT64_MAX, kFlagWaitNs, target.device(), kBytes, kSeed,
                                          static_cast<uint64_t*>(result.ptr), stream));
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(cudaStreamQuery(stream), cudaErrorNotReady) << "the kernel must be waiting for the flag";

  // The peer writes its pattern into our mapped target, one imm per WR.
  ASSERT_EQ(agent.call("write_burst " + reg->desc.to_hex() + " " + std::to_string(writes) + " " + std::to_string(kChunk) +
                       " " + std::to_string(kImm)),
            "ok");
  FL_CUDA_ASSERT(cudaStreamSynchronize(stream));
  const FlagResult r = read_result(result);
  EXPECT_EQ(r.outcome, 0u) << "0 = flag set, 1 = error value, 2 = timeout";
  EXPECT_EQ(r.mismatches, 0u) << "first mismatch at " << r.first_mismatch;
  EXPECT_EQ(flag->load(), 1u);
  EXPECT_EQ(tools::find_pattern_mismatch(target.host(), kBytes, kSeed), kBytes);
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  std::string status;
  while ((status = agent.call("burst_status")).rfind(std::to_string(writes) + " 1", 0) != 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(status, std::to_string(writes) + " 1 ok=" + std::to_string(writes));
  cudaStreamDestroy(stream);
}

INSTANTIATE_TEST_SUITE_P(Domains, GpuFlagTransfer, ::testing::Values(1, 2),
                         [](const auto& info) { return "tcp_" + std::to_string(info.param) + "dom"; });

TEST(GpuFlag, FailedExpectationSetsTheErrorValue) {
  auto engine = build_engine(TransferEngineBuilder().provider("tcp").interfaces({"lo"}));
  ASSERT_TRUE(engine);
  Result<MappedWord> flag = alloc_mapped_word();
  ASSERT_TRUE(flag.ok());
  // Nothing will arrive: the expectation's deadline ends it, and the sink stores the error value.
  ASSERT_TRUE(engine->imms().expect(9, 3, Completion::flag(flag->host_ptr(), 1, 0xdead).with_timeout(200ms)).ok());
  DeviceBuffer result(sizeof(FlagResult));
  MappedBuffer unused(64);
  FL_KERNEL_ASSERT(launch_flag_then_check(flag->device_ptr(), 1, 0xdead, kFlagWaitNs, unused.device(), 0, 0,
                                          static_cast<uint64_t*>(result.ptr), nullptr));
  FL_CUDA_ASSERT(cudaDeviceSynchronize());
  EXPECT_EQ(read_result(result).outcome, 1u);
  EXPECT_EQ(flag->load(), 0xdeadu);
}

}  // namespace
}  // namespace fabric_lib::device_tests

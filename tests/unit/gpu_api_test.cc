// The GPU-facing API where no GPU can be used (CPU builds, and CUDA builds on machines without a
// device, like CI): every call answers with a clear Unsupported instead of failing obscurely, host
// memory keeps working (kAuto detects it), and the builder validates pin_watcher. On a machine
// with a GPU the Unsupported cases are skipped: tests/device covers them there.
#include <gtest/gtest.h>
#include <unistd.h>

#include <vector>

#include "fabric_lib/fabric_lib.h"

namespace fabric_lib {
namespace {

std::unique_ptr<TransferEngine> tcp_engine() {
  Result<std::unique_ptr<TransferEngine>> e = TransferEngineBuilder().provider("tcp").interfaces({"lo"}).build();
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  return e.ok() ? std::move(e).value() : nullptr;
}

bool gpu_usable() { return alloc_mapped_word().ok(); }

TEST(GpuApi, PinWatcherIsValidated) {
  const long cpus = sysconf(_SC_NPROCESSORS_CONF);
  auto build = [](TransferEngineBuilder b) {
    Result<std::unique_ptr<TransferEngine>> r = b.build();
    if (r.ok()) (*r)->stop();
    return r.ok() ? ErrorCode::kOk : r.status().code();
  };
  EXPECT_EQ(build(TransferEngineBuilder().provider("tcp").interfaces({"lo"}).pin_watcher(static_cast<int>(cpus))),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(build(TransferEngineBuilder().provider("tcp").interfaces({"lo"}).pin_watcher(-2)), ErrorCode::kInvalidArgument);
  EXPECT_EQ(build(TransferEngineBuilder().provider("tcp").interfaces({"lo"}).pin_watcher(0)), ErrorCode::kOk);
}

TEST(GpuApi, AutoDetectedHostMemoryRegistersAsHost) {
  auto engine = tcp_engine();
  ASSERT_TRUE(engine);
  std::vector<uint8_t> host(4096);
  Result<MrRegistration> reg = engine->register_memory(host.data(), host.size(), Access::kRemoteWrite, MemoryKind::kAuto);
  ASSERT_TRUE(reg.ok()) << reg.status().to_string();
  EXPECT_EQ(reg->desc.memory_kind(), MemoryKind::kHost);
  // kAuto never reaches the wire.
  Result<MrDesc> decoded = MrDesc::from_bytes(reg->desc.to_bytes());
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(decoded->memory_kind(), MemoryKind::kHost);
}

TEST(GpuApi, WithoutAGpuEveryGpuCallSaysUnsupported) {
  if (gpu_usable()) GTEST_SKIP() << "a CUDA device is usable here: tests/device covers the GPU paths";
  Result<MappedWord> word = alloc_mapped_word();
  ASSERT_FALSE(word.ok());
  EXPECT_EQ(word.status().code(), ErrorCode::kUnsupported) << word.status().to_string();

  auto engine = tcp_engine();
  ASSERT_TRUE(engine);
  Result<UvmWatcher> watcher = engine->alloc_uvm_watcher([](uint64_t, uint64_t) { return true; });
  ASSERT_FALSE(watcher.ok());
  EXPECT_EQ(watcher.status().code(), ErrorCode::kUnsupported) << watcher.status().to_string();

  std::vector<uint8_t> not_gpu(4096);
  Result<MrRegistration> reg =
      engine->register_memory(not_gpu.data(), not_gpu.size(), Access::kLocalOnly, MemoryKind::kCuda);
  ASSERT_FALSE(reg.ok());
  EXPECT_EQ(reg.status().code(), ErrorCode::kUnsupported) << reg.status().to_string();
}

TEST(GpuApi, WatcherArgumentsAndLifecycle) {
  auto engine = tcp_engine();
  ASSERT_TRUE(engine);
  EXPECT_EQ(engine->alloc_uvm_watcher(nullptr).status().code(), ErrorCode::kInvalidArgument);
  engine->stop();
  EXPECT_EQ(engine->alloc_uvm_watcher([](uint64_t, uint64_t) { return true; }).status().code(), ErrorCode::kStopped);
  UvmWatcher empty;
  EXPECT_FALSE(empty.valid());
  EXPECT_EQ(empty.host_ptr(), nullptr);
  EXPECT_EQ(empty.value(), 0u);
  empty.reset();  // harmless
}

}  // namespace
}  // namespace fabric_lib

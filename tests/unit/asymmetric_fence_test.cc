// Asymmetric fences (base/asymmetric_fence.h): the store-buffering litmus test. One thread stores
// its flag, makes the light fence (a compiler barrier) and loads the other's; the other stores,
// makes the heavy fence (membarrier) and loads. On x86 a plain store may still sit in the store
// buffer when the next load runs, so without the heavy fence both loads read 0 now and then (the
// test fails when the heavy fence is replaced by a light one: checked when it was written). With
// it, never.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>

#include "base/asymmetric_fence.h"
#include "base/cpu_relax.h"

namespace fabric_lib {
namespace {

TEST(AsymmetricFence, MembarrierIsAvailableHere) {
  // Linux >= 4.14 outside a sandbox that forbids the call; the submit path's own stripes need it.
  EXPECT_TRUE(asymmetric_fences_available());
}

TEST(AsymmetricFence, StoreBufferingNeverLetsBothSidesMissTheOther) {
  ASSERT_TRUE(asymmetric_fences_available());
  constexpr uint32_t kRounds = 20000;
  alignas(64) std::atomic<int> a{0};
  alignas(64) std::atomic<int> b{0};
  alignas(64) std::atomic<uint32_t> go{0};    // round r starts when go == r
  alignas(64) std::atomic<uint32_t> done{0};  // the light side finished round r: done == r
  int light_saw[kRounds];
  std::thread light([&] {
    for (uint32_t r = 1; r <= kRounds; ++r) {
      while (go.load(std::memory_order_acquire) != r) cpu_relax();
      a.store(1, std::memory_order_relaxed);
      asymmetric_light_fence();
      light_saw[r - 1] = b.load(std::memory_order_relaxed);
      done.store(r, std::memory_order_release);
    }
  });
  uint32_t neither = 0;
  for (uint32_t r = 1; r <= kRounds; ++r) {
    a.store(0, std::memory_order_relaxed);
    b.store(0, std::memory_order_relaxed);
    go.store(r, std::memory_order_release);
    b.store(1, std::memory_order_relaxed);
    asymmetric_heavy_fence();
    const int heavy_saw = a.load(std::memory_order_relaxed);
    while (done.load(std::memory_order_acquire) != r) cpu_relax();
    if (heavy_saw == 0 && light_saw[r - 1] == 0) ++neither;
  }
  light.join();
  EXPECT_EQ(neither, 0u) << "rounds where each side missed the other's store";
}

}  // namespace
}  // namespace fabric_lib

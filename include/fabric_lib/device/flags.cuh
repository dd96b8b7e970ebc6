// Device-side helpers for 64-bit words in mapped pinned host memory (fabric_lib/uvm_watcher.h):
//   - kernels wait for flags the host sets (Completion::flag stores `value` with release ordering
//     when an operation or an imm expectation completes, `error_value` when it fails),
//   - kernels publish progress to a UvmWatcher (store_release), which calls its CPU callback.
//
// Include from CUDA sources only (nvcc). Pass MappedWord::device_ptr() / UvmWatcher::device_ptr()
// to the kernel. The accesses are system-scope (the other side is the CPU, across PCIe), so a
// kernel sees the host's writes without caching them, and the host sees the kernel's in order.
// Every helper is meant for one thread (e.g. thread 0 of a block, followed by __syncthreads()).
#pragma once

#include <cstdint>

namespace fabric_lib::device {

// Acquire load at system scope: later reads (e.g. of data that writes delivered before the flag
// was set) are not satisfied before it.
__device__ __forceinline__ uint64_t load_acquire(const uint64_t* word) {
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(word) : "memory");
  return v;
}

// Release store at system scope: earlier writes of this thread (and those it observed) are visible
// to the CPU before the new value is. Use it to bump a UvmWatcher word.
__device__ __forceinline__ void store_release(uint64_t* word, uint64_t value) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(word), "l"(value) : "memory");
}

// Nanoseconds of the GPU's global timer (coarse on some GPUs; fine for timeouts).
__device__ __forceinline__ uint64_t globaltimer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Outcome of a bounded wait.
enum class FlagWait : int { kSet = 0, kError = 1, kTimeout = 2 };

// Spins until *flag == value (kSet) or *flag == error_value (kError), or `timeout_ns` passed
// (kTimeout; 0 waits forever). The final value read goes to *seen when it is not null.
// Completion::flag's default error value is UINT64_MAX.
__device__ __forceinline__ FlagWait wait_flag(const uint64_t* flag, uint64_t value, uint64_t error_value = UINT64_MAX,
                                              uint64_t timeout_ns = 0, uint64_t* seen = nullptr) {
  const uint64_t start = timeout_ns ? globaltimer_ns() : 0;
  while (true) {
    const uint64_t v = load_acquire(flag);
    if (v == value || v == error_value) {
      if (seen) *seen = v;
      return v == value ? FlagWait::kSet : FlagWait::kError;
    }
    if (timeout_ns && globaltimer_ns() - start > timeout_ns) {
      if (seen) *seen = v;
      return FlagWait::kTimeout;
    }
    __nanosleep(64);  // keeps PCIe traffic down; the host's store arrives in ~1 us anyway
  }
}

// Spins until *flag >= value (counters that only grow, e.g. one flag value per step). Same
// timeout convention; returns the last value read.
__device__ __forceinline__ uint64_t wait_flag_at_least(const uint64_t* flag, uint64_t value, uint64_t timeout_ns = 0) {
  const uint64_t start = timeout_ns ? globaltimer_ns() : 0;
  uint64_t v;
  while ((v = load_acquire(flag)) < value) {
    if (timeout_ns && globaltimer_ns() - start > timeout_ns) break;
    __nanosleep(64);
  }
  return v;
}

// Re-arms a flag for the next use (e.g. before the host registers the next expectation that
// sets it). System-scope release store, so the host never reads the old "set" value after it
// has seen any later write of this thread.
__device__ __forceinline__ void reset_flag(uint64_t* flag, uint64_t value = 0) { store_release(flag, value); }

}  // namespace fabric_lib::device

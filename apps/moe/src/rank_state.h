// What the halves (CPU or CUDA), the host proxy and AllToAll share on one rank: the geometry,
// the region pointers, the control words and plans, the doorbell and the step counter.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <mutex>
#include <thread>

#include "doorbell.h"
#include "fabric_lib/moe/config.h"
#include "fabric_lib/moe/layout.h"
#include "fabric_lib/status.h"

namespace fabric_lib::moe::detail {

// Pointers to the regions. On CPU ranks every region is host memory. On GPU ranks route_send,
// route_recv and the control region are mapped pinned host memory (the proxy reads them), the
// other regions are device memory.
struct Regions {
  uint8_t* route_send = nullptr;
  uint8_t* route_recv = nullptr;
  uint8_t* dispatch_send = nullptr;
  uint8_t* dispatch_recv = nullptr;
  uint8_t* combine_send = nullptr;
  uint8_t* combine_recv = nullptr;
  uint32_t* positions = nullptr;  // M * K rows of this step's pairs (workspace)
};

// The control region: kNumControlWords words on separate lines, then two receive plans.
class Control {
 public:
  Control() = default;
  Control(uint8_t* host, uint8_t* device, RecvPlanLayout lay) : host_(host), device_(device), lay_(lay) {}

  uint64_t* word(uint32_t w) const { return reinterpret_cast<uint64_t*>(host_ + control_offset(w)); }
  uint64_t load(uint32_t w) const { return std::atomic_ref<uint64_t>(*word(w)).load(std::memory_order_acquire); }
  void store(uint32_t w, uint64_t v) const { std::atomic_ref<uint64_t>(*word(w)).store(v, std::memory_order_release); }
  // Sets the abort word once (the first failure wins); returns whether this call set it.
  bool set_abort(uint64_t v) const {
    uint64_t expected = 0;
    return std::atomic_ref<uint64_t>(*word(kAbort)).compare_exchange_strong(expected, v, std::memory_order_acq_rel);
  }
  uint32_t* plan(uint64_t step) const {
    return reinterpret_cast<uint32_t*>(host_ + plan_region_offset()) + size_t{route_parity(step)} * lay_.words();
  }
  uint8_t* host() const { return host_; }
  uint8_t* device() const { return device_; }
  const RecvPlanLayout& layout() const { return lay_; }

 private:
  uint8_t* host_ = nullptr;
  uint8_t* device_ = nullptr;
  RecvPlanLayout lay_;
};

inline uint64_t abort_word(ErrorCode code, uint64_t step) { return (uint64_t(code) << 32) | (step & 0xFFFFFFFFu); }
inline ErrorCode abort_code(uint64_t word) { return static_cast<ErrorCode>(word >> 32); }

// The first failure of a rank, with its message (the abort word holds only the code).
class FailureRecord {
 public:
  void set(const Status& s) {
    std::lock_guard<std::mutex> lock(mu_);
    if (status_.ok()) status_ = s;
  }
  Status get() const {
    std::lock_guard<std::mutex> lock(mu_);
    return status_;
  }

 private:
  mutable std::mutex mu_;
  Status status_;
};

struct RankState {
  MoeConfig config;
  Geometry g;
  Regions regions;
  Control control;
  Doorbell bell;
  FailureRecord failure;
  bool on_gpu = false;
  // Appended to deadline and provider failures when set (AllToAll::create: CUDA lazy loading with the ipc backend).
  std::string failure_hint;

  // Records `why` and sets the abort word (kernels and CPU halves stop waiting).
  void fail(const Status& why, uint64_t step) {
    const bool hinted = !failure_hint.empty() &&
                        (why.code() == ErrorCode::kDeadlineExceeded || why.code() == ErrorCode::kProviderError);
    failure.set(hinted ? Status(why.code(), why.message() + failure_hint) : why);
    control.set_abort(abort_word(why.code() == ErrorCode::kOk ? ErrorCode::kInternal : why.code(), step));
    bell.ring();
  }
  Status failure_status() const {
    Status s = failure.get();
    if (!s.ok()) return s;
    const uint64_t a = control.load(kAbort);
    if (a != 0) return Status(abort_code(a), "aborted at step " + std::to_string(a & 0xFFFFFFFFu) + " (set by a kernel)");
    return ok_status();
  }
};

}  // namespace fabric_lib::moe::detail

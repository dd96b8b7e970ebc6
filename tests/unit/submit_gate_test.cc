// SubmitGate (core/submit_gate.h): close() refuses later scopes and busy() counts every scope that
// saw the gate open until it leaves — on stripes of a thread's own (plain stores, the asymmetric
// fence) and on shared stripes (threads beyond base/thread_slot.h's limit) alike — and the
// requests counted per operation type add up across threads.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "base/cpu_relax.h"
#include "base/thread_slot.h"
#include "core/submit_gate.h"

namespace fabric_lib::detail {
namespace {

using namespace std::chrono_literals;

// Holds every thread slot with a parked thread while it lives: threads started meanwhile get none.
class AllSlotsHeld {
 public:
  AllSlotsHeld() {
    for (size_t i = 0; i < kMaxThreadSlots; ++i) {
      threads_.emplace_back([this] {
        thread_slot();
        std::unique_lock lock(mu_);
        ++parked_;
        cv_.notify_all();
        cv_.wait(lock, [this] { return release_; });
      });
    }
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return parked_ == kMaxThreadSlots; });
  }
  ~AllSlotsHeld() {
    {
      std::lock_guard lock(mu_);
      release_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  size_t parked_ = 0;
  bool release_ = false;
  std::vector<std::thread> threads_;
};

// A thread inside a scope that saw the gate open keeps busy() true across close() until it leaves.
void close_waits_for_a_scope_inside(bool expect_own_slot) {
  SubmitGate gate;
  gate.open();
  std::mutex mu;
  std::condition_variable cv;
  int stage = 0;  // 1: inside, saw it open; 2: may leave
  bool saw_open = false, had_slot = false;
  std::thread submitter([&] {
    had_slot = thread_slot() >= 0;
    SubmitGate::Scope scope(gate, OpType::kWrite);
    saw_open = scope.open();
    std::unique_lock lock(mu);
    stage = 1;
    cv.notify_all();
    cv.wait_for(lock, 10s, [&] { return stage == 2; });  // bounded: never a hang
  });
  {
    std::unique_lock lock(mu);
    EXPECT_TRUE(cv.wait_for(lock, 10s, [&] { return stage == 1; })) << "the submitter never got inside";
  }
  EXPECT_TRUE(gate.busy());
  gate.close();
  EXPECT_FALSE(gate.accepting());
  // close() has returned; the scope is still inside and must still be counted.
  EXPECT_TRUE(gate.busy()) << "close() lost a scope that is still inside";
  {
    std::lock_guard lock(mu);
    stage = 2;
  }
  cv.notify_all();
  submitter.join();
  EXPECT_TRUE(saw_open);
  EXPECT_EQ(had_slot, expect_own_slot);
  EXPECT_FALSE(gate.busy());
  SubmitGate::Scope late(gate, OpType::kWrite);
  EXPECT_FALSE(late.open());
}

TEST(SubmitGate, CloseWaitsForAScopeInsideOnItsOwnStripe) {
  ASSERT_TRUE(asymmetric_fences_available());
  close_waits_for_a_scope_inside(/*expect_own_slot=*/true);
}

TEST(SubmitGate, CloseWaitsForAScopeInsideOnASharedStripe) {
  AllSlotsHeld held;
  close_waits_for_a_scope_inside(/*expect_own_slot=*/false);
}

// Many threads counting at once, some on stripes of their own and some (started while every slot
// was held) on shared ones: every count arrives, under its own operation type.
TEST(SubmitGate, CountsAddUpAcrossOwnAndSharedStripes) {
  SubmitGate gate;
  gate.open();
  constexpr int kPerThread = 20000;
  auto count = [&](OpType op) {
    for (int i = 0; i < kPerThread; ++i) {
      SubmitGate::Scope scope(gate, op);
      if (scope.open()) scope.count_submitted();
    }
  };
  std::vector<std::thread> own;
  for (int t = 0; t < 3; ++t) own.emplace_back(count, OpType::kWrite);
  for (std::thread& t : own) t.join();
  {
    AllSlotsHeld held;
    std::vector<std::thread> shared;
    for (int t = 0; t < 4; ++t) shared.emplace_back(count, t % 2 ? OpType::kScatter : OpType::kWrite);
    for (std::thread& t : shared) t.join();
  }
  EXPECT_EQ(gate.submitted(OpType::kWrite), uint64_t{5} * kPerThread);
  EXPECT_EQ(gate.submitted(OpType::kScatter), uint64_t{2} * kPerThread);
  EXPECT_EQ(gate.submitted(OpType::kImm), 0u);
  EXPECT_EQ(gate.submitted(), uint64_t{7} * kPerThread);
  EXPECT_FALSE(gate.busy());
}

// Threads enter and leave scopes without pause while the gate closes and reopens, round after
// round: once close() returned and busy() read false, no scope may be inside having seen the gate
// open — the store-then-load handshake of the asymmetric fence under fire.
TEST(SubmitGate, NoScopeThatSawItOpenOutlivesACloseThatFoundItIdle) {
  ASSERT_TRUE(asymmetric_fences_available());
  SubmitGate gate;
  std::atomic<bool> drained{false}, done{false};
  std::atomic<uint64_t> violations{0}, entered_open{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&] {
      while (!done.load(std::memory_order_relaxed)) {
        SubmitGate::Scope scope(gate, OpType::kWrite);
        if (!scope.open()) continue;
        entered_open.fetch_add(1, std::memory_order_relaxed);
        for (int i = 0; i < 8; ++i) cpu_relax();  // inside a while, as a submit is
        if (drained.load(std::memory_order_seq_cst)) violations.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  for (int round = 0; round < 4000; ++round) {
    drained.store(false, std::memory_order_seq_cst);
    gate.open();
    for (int i = 0; i < 64; ++i) cpu_relax();
    gate.close();
    while (gate.busy()) cpu_relax();
    drained.store(true, std::memory_order_seq_cst);
    for (int i = 0; i < 64; ++i) cpu_relax();
  }
  done.store(true);
  for (std::thread& t : threads) t.join();
  EXPECT_GT(entered_open.load(), 0u);
  EXPECT_EQ(violations.load(), 0u);
}

}  // namespace
}  // namespace fabric_lib::detail

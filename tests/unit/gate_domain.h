// A test decorator for an engine's domains (BuilderAccess::set_domain_decorator) that decides what
// reaches the provider: it holds writes back (kAgain) until opened, lets exactly `budget` through,
// holds their local completions until released, or turns them into a dead peer's errors. The
// test owns the Gate; the engine's domains share it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/builder_testing.h"
#include "support/forwarding_domain.h"
#include "transport/domain.h"

namespace fabric_lib::testing {

struct Gate {
  std::atomic<bool> open{true};
  std::atomic<int64_t> budget{-1};          // writes still allowed through (-1: any number)
  std::atomic<bool> hold_completions{false};  // keep local write completions back
  std::atomic<int64_t> fail_after{-1};      // completions after this many become PeerUnreachable (-1: never)
  std::atomic<uint64_t> refused{0};         // posts answered kAgain by the gate
  std::atomic<uint64_t> posted{0};          // writes handed to the provider
  std::atomic<uint64_t> completed{0};       // write completions seen from the provider
  std::mutex mu;
  std::vector<const void*> posted_sources;  // the source address of each posted write

  // Takes one write through the gate, or says kAgain.
  bool admit() {
    if (!open.load()) return false;
    int64_t b = budget.load();
    while (b >= 0) {
      if (b == 0) return false;
      if (budget.compare_exchange_weak(b, b - 1)) return true;
    }
    return true;
  }
};

class GateDomain final : public ForwardingDomain {
 public:
  GateDomain(std::unique_ptr<transport::Domain> inner, std::shared_ptr<Gate> gate)
      : ForwardingDomain(std::move(inner)), gate_(std::move(gate)) {}

  transport::PostResult post_write(const transport::WriteWr& wr, Status* e) override {
    if (!gate_->admit()) {
      gate_->refused.fetch_add(1);
      return transport::PostResult::kAgain;
    }
    const transport::PostResult r = inner_->post_write(wr, e);
    if (r == transport::PostResult::kPosted) {
      std::lock_guard lock(gate_->mu);
      gate_->posted_sources.push_back(wr.src);
      gate_->posted.fetch_add(1);
    } else if (gate_->budget.load() >= 0) {
      gate_->budget.fetch_add(1);  // not taken after all
    }
    return r;
  }
  size_t poll(std::vector<transport::Event>& out, size_t max) override {
    const size_t before = out.size();
    if (!gate_->hold_completions.load()) {
      while (!held_.empty() && out.size() - before < max) {
        out.push_back(std::move(held_.front()));
        held_.erase(held_.begin());
      }
    }
    if (out.size() - before >= max) return out.size() - before;
    scratch_.clear();
    inner_->poll(scratch_, max - (out.size() - before));
    for (transport::Event& ev : scratch_) {
      if (ev.kind == transport::EventKind::kWriteDone) {
        const uint64_t n = gate_->completed.fetch_add(1);
        const int64_t fail_after = gate_->fail_after.load();
        if (fail_after >= 0 && n >= static_cast<uint64_t>(fail_after)) {
          ev.status = Status(ErrorCode::kPeerUnreachable, "test gate: the peer is gone");
        }
        if (gate_->hold_completions.load()) {
          held_.push_back(std::move(ev));
          continue;
        }
      }
      out.push_back(std::move(ev));
    }
    return out.size() - before;
  }
  bool ready_to_block() override { return held_.empty() && inner_->ready_to_block(); }
  bool has_deferred_work() const override { return !held_.empty() || inner_->has_deferred_work(); }

 private:
  std::shared_ptr<Gate> gate_;
  std::vector<transport::Event> held_;     // worker thread only
  std::vector<transport::Event> scratch_;  // worker thread only
};

// A builder whose engine's domains all go through `gate`.
inline void gate_domains(TransferEngineBuilder& builder, std::shared_ptr<Gate> gate) {
  BuilderAccess::set_domain_decorator(builder, [gate](std::unique_ptr<transport::Domain> inner) {
    return std::unique_ptr<transport::Domain>(std::make_unique<GateDomain>(std::move(inner), gate));
  });
}

}  // namespace fabric_lib::testing

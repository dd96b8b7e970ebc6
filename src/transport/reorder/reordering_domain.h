// A Domain decorator that breaks ordering on purpose (DESIGN.md section 3): it posts the WRs of
// each window in a shuffled order and holds back a share of completions and imms for a few
// polls. The providers we can run here deliver mostly in order; EFA does not, and nothing above
// the Domain may depend on order. Reliability and data-before-imm are preserved: nothing is
// dropped, and an imm is only ever reported later than the inner domain reported it.
#pragma once

#include <memory>
#include <random>
#include <variant>
#include <vector>

#include "transport/domain.h"

namespace fabric_lib::transport {

class ReorderingDomain final : public Domain {
 public:
  ReorderingDomain(std::unique_ptr<Domain> inner, uint64_t seed);

  const DomainInfo& info() const override { return inner_->info(); }
  const std::vector<uint8_t>& address() const override { return inner_->address(); }
  Result<DomainMr> register_memory(void* ptr, size_t length, Access access, MemoryKind kind) override {
    return inner_->register_memory(ptr, length, access, kind);
  }
  void unregister_memory(uint64_t mr_id) override { inner_->unregister_memory(mr_id); }
  Result<PeerHandle> add_peer(std::span<const uint8_t> address) override { return inner_->add_peer(address); }
  // WRs still held for `peer` end with an error first: once the handle is removed it may be
  // reused for another peer, and they must never reach that one.
  void remove_peer(PeerHandle peer) override;

  PostResult post_write(const WriteWr& wr, Status* error) override;
  PostResult post_send(const SendWr& wr, Status* error) override;
  PostResult post_recv(const RecvWr& wr, Status* error) override { return inner_->post_recv(wr, error); }
  // Control messages pass straight through (the probe measures the path, not our shuffling).
  bool supports_control() const override { return inner_->supports_control(); }
  PostResult post_control_send(const SendWr& wr, Status* error) override { return inner_->post_control_send(wr, error); }
  PostResult post_control_recv(const RecvWr& wr, Status* error) override { return inner_->post_control_recv(wr, error); }
  size_t poll(std::vector<Event>& out, size_t max) override;

  int wait_fd() const override { return inner_->wait_fd(); }
  bool ready_to_block() override { return !has_deferred_work() && inner_->ready_to_block(); }
  bool has_deferred_work() const override { return !held_posts_.empty() || !held_events_.empty(); }
  // Proof that the wrapper is on and shuffling (EngineStats::unordered_*).
  std::shared_ptr<const DomainCounters> counters() const override { return counters_; }

  // WRs collected before they are posted in shuffled order.
  static constexpr size_t kWindow = 16;
  // One event in kHoldOneIn is held back for 1..kMaxHoldPolls polls.
  static constexpr unsigned kHoldOneIn = 3;
  static constexpr unsigned kMaxHoldPolls = 4;

 private:
  struct HeldEvent {
    Event event;
    unsigned polls_left;
  };
  void flush_posts();

  std::unique_ptr<Domain> inner_;
  std::mt19937_64 rng_;
  std::vector<std::variant<WriteWr, SendWr>> held_posts_;
  std::vector<HeldEvent> held_events_;
  std::vector<Event> scratch_;
  std::shared_ptr<DomainCounters> counters_ = std::make_shared<DomainCounters>();
};

}  // namespace fabric_lib::transport

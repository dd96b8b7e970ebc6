// A test decorator's base: every Domain call goes to the wrapped domain, so a decorator (fault
// injection, an instant domain for benchmarks) overrides only the calls it changes.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "transport/domain.h"

namespace fabric_lib::testing {

class ForwardingDomain : public transport::Domain {
 public:
  explicit ForwardingDomain(std::unique_ptr<transport::Domain> inner) : inner_(std::move(inner)) {}

  const transport::DomainInfo& info() const override { return inner_->info(); }
  const std::vector<uint8_t>& address() const override { return inner_->address(); }
  Result<transport::DomainMr> register_memory(void* p, size_t n, Access a, MemoryKind k) override {
    return inner_->register_memory(p, n, a, k);
  }
  void unregister_memory(uint64_t id) override { inner_->unregister_memory(id); }
  Result<transport::PeerHandle> add_peer(std::span<const uint8_t> a) override { return inner_->add_peer(a); }
  void remove_peer(transport::PeerHandle p) override { inner_->remove_peer(p); }
  transport::PostResult post_write(const transport::WriteWr& wr, Status* e) override { return inner_->post_write(wr, e); }
  // post_writes is not forwarded: Domain's default posts a run through this->post_write, so a
  // decorator that overrides post_write sees every WR of a run too.
  transport::PostResult post_send(const transport::SendWr& wr, Status* e) override { return inner_->post_send(wr, e); }
  transport::PostResult post_recv(const transport::RecvWr& wr, Status* e) override { return inner_->post_recv(wr, e); }
  bool supports_control() const override { return inner_->supports_control(); }
  transport::PostResult post_control_send(const transport::SendWr& wr, Status* e) override {
    return inner_->post_control_send(wr, e);
  }
  transport::PostResult post_control_recv(const transport::RecvWr& wr, Status* e) override {
    return inner_->post_control_recv(wr, e);
  }
  size_t poll(std::vector<transport::Event>& out, size_t max) override { return inner_->poll(out, max); }
  int wait_fd() const override { return inner_->wait_fd(); }
  bool ready_to_block() override { return inner_->ready_to_block(); }
  bool has_deferred_work() const override { return inner_->has_deferred_work(); }

 protected:
  std::unique_ptr<transport::Domain> inner_;
};

}  // namespace fabric_lib::testing

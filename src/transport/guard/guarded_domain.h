// A Domain decorator that brackets every call into the wrapped domain with a ProviderCallGuard,
// so a watchdog can tell when the worker is stuck inside the provider (provider_call_guard.h).
// Every method is called on the worker thread (registration too: it runs through the worker).
#pragma once

#include <memory>

#include "transport/domain.h"
#include "transport/guard/provider_call_guard.h"

namespace fabric_lib::transport {

class GuardedDomain final : public Domain {
 public:
  GuardedDomain(std::unique_ptr<Domain> inner, std::shared_ptr<ProviderCallGuard> watch)
      : inner_(std::move(inner)), watch_(std::move(watch)) {}
  // Closing endpoints calls the provider too.
  ~GuardedDomain() override {
    ProviderCall call(*watch_);
    inner_.reset();
  }

  const DomainInfo& info() const override { return inner_->info(); }
  const std::vector<uint8_t>& address() const override { return inner_->address(); }
  Result<DomainMr> register_memory(void* ptr, size_t length, Access access, MemoryKind kind) override {
    ProviderCall call(*watch_);
    return inner_->register_memory(ptr, length, access, kind);
  }
  void unregister_memory(uint64_t mr_id) override {
    ProviderCall call(*watch_);
    inner_->unregister_memory(mr_id);
  }
  Result<PeerHandle> add_peer(std::span<const uint8_t> address) override {
    ProviderCall call(*watch_);
    return inner_->add_peer(address);
  }
  void remove_peer(PeerHandle peer) override {
    ProviderCall call(*watch_);
    inner_->remove_peer(peer);
  }
  PostResult post_write(const WriteWr& wr, Status* error) override {
    ProviderCall call(*watch_);
    return inner_->post_write(wr, error);
  }
  size_t post_writes(std::span<const WriteWr> wrs, PostResult* last, Status* error) override {
    ProviderCall call(*watch_);  // one bracket for the run
    return inner_->post_writes(wrs, last, error);
  }
  size_t post_pages(const PageRunWr& run, PostResult* last, Status* error) override {
    ProviderCall call(*watch_);  // one bracket for the run
    return inner_->post_pages(run, last, error);
  }
  PostResult post_send(const SendWr& wr, Status* error) override {
    ProviderCall call(*watch_);
    return inner_->post_send(wr, error);
  }
  PostResult post_recv(const RecvWr& wr, Status* error) override {
    ProviderCall call(*watch_);
    return inner_->post_recv(wr, error);
  }
  bool supports_control() const override { return inner_->supports_control(); }
  PostResult post_control_send(const SendWr& wr, Status* error) override {
    ProviderCall call(*watch_);
    return inner_->post_control_send(wr, error);
  }
  PostResult post_control_recv(const RecvWr& wr, Status* error) override {
    ProviderCall call(*watch_);
    return inner_->post_control_recv(wr, error);
  }
  size_t poll(std::vector<Event>& out, size_t max) override {
    ProviderCall call(*watch_);
    return inner_->poll(out, max);
  }
  int wait_fd() const override { return inner_->wait_fd(); }
  bool ready_to_block() override {
    ProviderCall call(*watch_);
    return inner_->ready_to_block();
  }
  bool has_deferred_work() const override { return inner_->has_deferred_work(); }
  std::shared_ptr<const DomainCounters> counters() const override { return inner_->counters(); }

 private:
  std::unique_ptr<Domain> inner_;
  std::shared_ptr<ProviderCallGuard> watch_;
};

}  // namespace fabric_lib::transport

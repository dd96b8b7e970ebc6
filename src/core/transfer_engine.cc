// The public TransferEngine: a thin facade over detail::EngineCore.
#include "fabric_lib/transfer_engine.h"

#include "core/engine_core.h"
#include "core/peer_group_data.h"

namespace fabric_lib {

size_t PeerGroup::size() const { return data_ ? data_->descs.size() : 0; }

const MrDesc& PeerGroup::desc(size_t i) const {
  static const MrDesc kNone;
  return data_ && i < data_->descs.size() ? data_->descs[i] : kNone;
}

TransferEngine::TransferEngine(std::unique_ptr<detail::EngineCore> core) : core_(std::move(core)) {}
TransferEngine::~TransferEngine() = default;

DomainAddress TransferEngine::main_address() const { return core_->main_address(); }
std::vector<DomainAddress> TransferEngine::domain_addresses(size_t group) const { return core_->domain_addresses(group); }
size_t TransferEngine::num_groups() const { return core_->num_groups(); }
size_t TransferEngine::num_domains() const { return core_->num_domains(); }
std::string TransferEngine::provider() const { return core_->provider(); }

Result<MrRegistration> TransferEngine::register_memory(void* ptr, size_t length, Access access, MemoryKind kind,
                                                       size_t group) {
  return core_->register_memory(ptr, length, access, kind, group);
}
Status TransferEngine::unregister_memory(MrHandle handle) { return core_->unregister_memory(handle); }

Result<TransferId> TransferEngine::submit_send(const DomainAddress& dst, std::span<const uint8_t> message,
                                               Completion done) {
  return core_->submit_send(dst, message, std::move(done));
}
Status TransferEngine::post_recvs(size_t count, size_t max_length, RecvCallback on_recv, RecvErrorCallback on_error) {
  return core_->post_recvs(count, max_length, std::move(on_recv), std::move(on_error));
}
Result<TransferId> TransferEngine::submit_imm(uint32_t imm, const MrDesc& dst, Completion done, size_t group) {
  return core_->submit_imm(imm, dst, std::move(done), group);
}
Result<TransferId> TransferEngine::submit_write(WriteRequest request, Completion done) {
  return core_->submit_write(std::move(request), std::move(done));
}
Result<TransferId> TransferEngine::submit_paged_writes(PagedWriteRequest request, Completion done) {
  return core_->submit_paged_writes(std::move(request), std::move(done));
}
Result<TransferId> TransferEngine::submit_scatter(ScatterRequest request, Completion done) {
  return core_->submit_scatter(std::move(request), std::move(done));
}
Result<TransferId> TransferEngine::submit_barrier(uint32_t imm, std::span<const MrDesc> peers, Completion done,
                                                  size_t group) {
  return core_->submit_barrier(imm, peers, std::move(done), group);
}
Result<PeerGroup> TransferEngine::add_peer_group(std::span<const MrDesc> peers, size_t group) {
  return core_->add_peer_group(peers, group);
}
Status TransferEngine::forget_peer(const MrDesc& desc, size_t group) { return core_->forget_peer(desc, group); }

ImmCounter& TransferEngine::imms() { return core_->imms(); }
Result<UvmWatcher> TransferEngine::alloc_uvm_watcher(WatchCallback callback) {
  return core_->alloc_uvm_watcher(std::move(callback));
}
Status TransferEngine::stop() { return core_->stop(); }
bool TransferEngine::stopped() const { return core_->stopped(); }
bool TransferEngine::on_callback_thread() const { return core_->on_callback_thread(); }
EngineStats TransferEngine::stats() const { return core_->stats(); }
std::vector<uint32_t> TransferEngine::take_submit_latencies_ns() { return core_->take_submit_latencies_ns(); }
std::vector<PeerStatus> TransferEngine::peer_status(size_t group) { return core_->peer_status(group); }

}  // namespace fabric_lib

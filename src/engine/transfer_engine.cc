// The public TransferEngine: a thin facade over detail::EngineCore. It also unwraps and wraps the
// public handle types (PeerGroup, UvmWatcher) whose contents only the core knows.
#include "fabric_lib/transfer_engine.h"

#include "core/peer_group_data.h"
#include "core/prepared_data.h"
#include "core/uvm_watcher_state.h"
#include "engine/engine_impl.h"
#ifdef FABRIC_LIB_HAVE_PROMETHEUS
#include "exporter/prometheus_endpoint.h"
#endif

namespace fabric_lib {

Result<std::unique_ptr<TransferEngine::Impl>> TransferEngine::Impl::start(detail::EngineOptions options,
                                                                          const std::string& metrics_endpoint) {
#ifndef FABRIC_LIB_HAVE_PROMETHEUS
  if (!metrics_endpoint.empty()) {
    return unsupported("metrics_endpoint: this fabric-lib was built without prometheus-cpp "
                       "(FABRIC_LIB_METRICS_EXPORTER; Debian's prometheus-cpp-dev)");
  }
#endif
  auto impl = std::make_unique<Impl>();
  impl->core = std::make_unique<detail::EngineCore>(std::move(options));
  FABRIC_LIB_RETURN_IF_ERROR(impl->core->start());
#ifdef FABRIC_LIB_HAVE_PROMETHEUS
  if (!metrics_endpoint.empty()) {
    detail::EngineCore* core = impl->core.get();
    Result<std::unique_ptr<exporter::PrometheusEndpoint>> endpoint =
        exporter::PrometheusEndpoint::start(metrics_endpoint, [core] { return core->metrics(); });
    if (!endpoint.ok()) return endpoint.status();
    impl->endpoint_address = (*endpoint)->address();
    impl->endpoint = std::shared_ptr<exporter::PrometheusEndpoint>(std::move(endpoint).value());
  }
#endif
  return impl;
}

size_t PeerGroup::size() const { return data_ ? data_->descs.size() : 0; }

const MrDesc& PeerGroup::desc(size_t i) const {
  static const MrDesc kNone;
  return data_ && i < data_->descs.size() ? data_->descs[i] : kNone;
}

TransferEngine::TransferEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TransferEngine::~TransferEngine() = default;

DomainAddress TransferEngine::main_address() const { return impl_->core->main_address(); }
std::vector<DomainAddress> TransferEngine::domain_addresses(size_t group) const {
  return impl_->core->domain_addresses(group);
}
size_t TransferEngine::num_groups() const { return impl_->core->num_groups(); }
size_t TransferEngine::num_domains() const { return impl_->core->num_domains(); }
std::string TransferEngine::provider() const { return impl_->core->provider(); }

Result<MrRegistration> TransferEngine::register_memory(void* ptr, size_t length, Access access, MemoryKind kind,
                                                       size_t group) {
  return impl_->core->register_memory(ptr, length, access, kind, group);
}
Status TransferEngine::unregister_memory(MrHandle handle) { return impl_->core->unregister_memory(handle); }

Result<TransferId> TransferEngine::submit_send(const DomainAddress& dst, std::span<const uint8_t> message,
                                               Completion done) {
  return impl_->core->submit_send(dst, message, std::move(done));
}
Status TransferEngine::post_recvs(size_t count, size_t max_length, RecvCallback on_recv, RecvErrorCallback on_error) {
  return impl_->core->post_recvs(count, max_length, std::move(on_recv), std::move(on_error));
}
Result<TransferId> TransferEngine::submit_send(const DomainAddress& dst, MrHandle src, uint64_t offset, uint64_t length,
                                               Completion done) {
  return impl_->core->submit_send(dst, src, offset, length, std::move(done));
}
Status TransferEngine::post_recvs_into(MrHandle region, uint64_t offset, size_t slot_bytes, size_t count,
                                       RecvCallback on_recv, RecvErrorCallback on_error) {
  return impl_->core->post_recvs_into(region, offset, slot_bytes, count, std::move(on_recv), std::move(on_error));
}

size_t PreparedScatter::targets() const { return data_ ? data_->targets.size() : 0; }

Result<PreparedPagedWrites> TransferEngine::prepare_paged_writes(const PagedWriteTemplate& t) {
  Result<std::shared_ptr<const PreparedPagedWrites::Data>> data = impl_->core->prepare_paged_writes(t);
  if (!data.ok()) return data.status();
  return PreparedPagedWrites(std::move(data).value());
}
Result<TransferId> TransferEngine::submit_prepared(const PreparedPagedWrites& prepared,
                                                   std::span<const uint32_t> src_pages,
                                                   std::span<const uint32_t> dst_pages, std::optional<uint32_t> imm,
                                                   Completion done) {
  if (prepared.empty()) return invalid_argument("submit_prepared: empty prepared request");
  return impl_->core->submit_prepared(*prepared.data_, src_pages, dst_pages, imm, std::move(done));
}
Result<PreparedScatter> TransferEngine::prepare_scatter(const ScatterTemplate& t) {
  if (!t.group || t.group->empty()) return invalid_argument("prepare_scatter: a PeerGroup is required (add_peer_group)");
  Result<std::shared_ptr<const PreparedScatter::Data>> data = impl_->core->prepare_scatter(t, t.group->data_);
  if (!data.ok()) return data.status();
  return PreparedScatter(std::move(data).value());
}
Result<TransferId> TransferEngine::submit_prepared(const PreparedScatter& prepared, std::span<const ScatterSlice> slices,
                                                   std::optional<uint32_t> imm, Completion done) {
  if (prepared.empty()) return invalid_argument("submit_prepared: empty prepared scatter");
  return impl_->core->submit_prepared(*prepared.data_, slices, imm, std::move(done));
}
Status TransferEngine::cancel(TransferId id) { return impl_->core->cancel(id); }
size_t TransferEngine::progress(size_t max_events) { return impl_->core->progress(max_events); }
Result<TransferId> TransferEngine::submit_imm(uint32_t imm, const MrDesc& dst, Completion done, size_t group) {
  return impl_->core->submit_imm(imm, dst, std::move(done), group);
}
Result<TransferId> TransferEngine::submit_write(WriteRequest request, Completion done) {
  return impl_->core->submit_write(std::move(request), std::move(done));
}
Result<TransferId> TransferEngine::submit_paged_writes(const PagedWriteRequest& request, Completion done) {
  return impl_->core->submit_paged_writes(request, std::move(done));
}
Result<TransferId> TransferEngine::submit_paged_writes(PagedWriteRequest&& request, Completion done) {
  return impl_->core->submit_paged_writes(std::move(request), std::move(done));
}
Result<TransferId> TransferEngine::submit_scatter(const ScatterRequest& request, Completion done) {
  // The group's resolved destinations are private to PeerGroup: checked and handed on here.
  if (request.group && request.group->empty()) return invalid_argument("submit_scatter: empty peer group");
  return impl_->core->submit_scatter(request, request.group ? request.group->data_ : nullptr, std::move(done));
}
Result<TransferId> TransferEngine::submit_barrier(uint32_t imm, std::span<const MrDesc> peers, Completion done,
                                                  size_t group) {
  return impl_->core->submit_barrier(imm, peers, std::move(done), group);
}
Result<PeerGroup> TransferEngine::add_peer_group(std::span<const MrDesc> peers, size_t group) {
  Result<std::shared_ptr<const PeerGroup::Data>> data = impl_->core->add_peer_group(peers, group);
  if (!data.ok()) return data.status();
  return PeerGroup(std::move(data).value());
}
Status TransferEngine::forget_peer(const MrDesc& desc, size_t group) { return impl_->core->forget_peer(desc, group); }

ImmCounter& TransferEngine::imms() { return impl_->core->imms(); }
Result<UvmWatcher> TransferEngine::alloc_uvm_watcher(WatchCallback callback) {
  Result<std::unique_ptr<UvmWatcher::State>> state = impl_->core->alloc_uvm_watcher(std::move(callback));
  if (!state.ok()) return state.status();
  return UvmWatcher(std::move(state).value());
}
Status TransferEngine::stop() { return impl_->core->stop(); }
bool TransferEngine::stopped() const { return impl_->core->stopped(); }
bool TransferEngine::on_callback_thread() const { return impl_->core->on_callback_thread(); }
EngineStats TransferEngine::stats() const { return impl_->core->stats(); }
std::vector<uint32_t> TransferEngine::take_submit_latencies_ns() { return impl_->core->take_submit_latencies_ns(); }
std::vector<uint32_t> TransferEngine::take_posting_times_ns() { return impl_->core->take_posting_times_ns(); }
std::vector<PeerStatus> TransferEngine::peer_status(size_t group) { return impl_->core->peer_status(group); }
Metrics TransferEngine::metrics() const { return impl_->core->metrics(); }
MetricsRegistry& TransferEngine::metrics_registry() { return impl_->core->metrics_registry(); }
std::string TransferEngine::metrics_endpoint() const { return impl_->endpoint_address; }

}  // namespace fabric_lib

// EngineCore: two-sided messages (SEND / RECV): copied or zero-copy sends, receive slots the
// engine allocates or the caller registered. They use group 0's domain 0 and host memory.
#include "core/engine_core.h"

namespace fabric_lib::detail {

Result<TransferId> EngineCore::submit_send(const DomainAddress& dst, std::span<const uint8_t> message,
                                           Completion done) {
  SubmitScope scope(*this, OpType::kSend);
  if (!scope.accepting()) return fabric_lib::stopped("engine stopped");
  if (dst.empty()) return invalid_argument("submit_send: empty destination address");
  if (message.size() > options_.max_message_bytes) {
    return invalid_argument("message of " + std::to_string(message.size()) + " bytes exceeds max_message_bytes (" +
                            std::to_string(options_.max_message_bytes) + ")");
  }
  RequestPool::Ptr r = requests_->take();
  if (!r) return RequestPool::too_many_requests();
  r->kind = RequestKind::kSend;
  r->completion = std::move(done);
  r->message.assign(message.begin(), message.end());
  r->send_to = dst;
  return enqueue(0, std::move(r), scope);
}

Status EngineCore::post_recvs(size_t count, size_t max_length, RecvCallback on_recv, RecvErrorCallback on_error) {
  if (!gate_.accepting()) return fabric_lib::stopped("engine stopped");
  if (count == 0 || count > 65536) return invalid_argument("post_recvs: count must be 1..65536");
  if (max_length == 0 || max_length > (size_t{1} << 30)) return invalid_argument("post_recvs: max_length must be 1..1 GiB");
  if (!on_recv) return invalid_argument("post_recvs: no receive callback");
  auto pool = std::make_shared<RecvPool>();
  pool->on_recv = std::move(on_recv);
  pool->on_error = std::move(on_error);
  return workers_[0]->run_sync([&](GroupWorker& w) {
    Result<BufferBlock> block = BufferBlock::allocate(w.domain(0), count, max_length);
    if (!block.ok()) return block.status();
    pool->owned = std::move(block).value();
    pool->base = pool->owned.memory.get();
    pool->slot_bytes = max_length;
    pool->desc = pool->owned.mr.desc;
    for (size_t i = 0; i < count; ++i) pool->slots.push_back({pool.get(), i});
    return w.add_recv_pool(pool);
  });
}

// The region two-sided messages may use: registered in group 0 (whose domain 0 sends and
// receives them), in host memory, [offset, offset + length) inside it.
Result<std::shared_ptr<MrEntry>> EngineCore::message_region(MrHandle handle, uint64_t offset, uint64_t length,
                                                            const char* what) const {
  Result<std::shared_ptr<MrEntry>> entry = local_region(handle, offset, length);
  if (!entry.ok()) return Status(entry.status().code(), std::string(what) + ": " + entry.status().message());
  if ((*entry)->group != 0) {
    return invalid_argument(std::string(what) + ": the region must be registered in group 0 (messages use its domain 0)");
  }
  if ((*entry)->kind != MemoryKind::kHost) {
    return unsupported(std::string(what) + ": messages move through host memory; write GPU memory with submit_write");
  }
  return entry;
}

Status EngineCore::post_recvs_into(MrHandle region, uint64_t offset, size_t slot_bytes, size_t count,
                                   RecvCallback on_recv, RecvErrorCallback on_error) {
  if (!gate_.accepting()) return fabric_lib::stopped("engine stopped");
  if (count == 0 || count > 65536) return invalid_argument("post_recvs_into: count must be 1..65536");
  if (slot_bytes == 0 || slot_bytes > (size_t{1} << 30)) return invalid_argument("post_recvs_into: slot_bytes must be 1..1 GiB");
  if (!on_recv) return invalid_argument("post_recvs_into: no receive callback");
  const unsigned __int128 bytes = static_cast<unsigned __int128>(slot_bytes) * count;
  if (bytes > UINT64_MAX) return out_of_range("post_recvs_into: count * slot_bytes overflows");
  Result<std::shared_ptr<MrEntry>> entry = message_region(region, offset, static_cast<uint64_t>(bytes), "post_recvs_into");
  if (!entry.ok()) return entry.status();
  auto pool = std::make_shared<RecvPool>();
  pool->on_recv = std::move(on_recv);
  pool->on_error = std::move(on_error);
  pool->base = (*entry)->ptr + offset;
  pool->slot_bytes = slot_bytes;
  pool->desc = (*entry)->domain_mrs[0].desc;
  pool->region = *entry;
  for (size_t i = 0; i < count; ++i) pool->slots.push_back({pool.get(), i});
  return workers_[0]->run_sync([&](GroupWorker& w) { return w.add_recv_pool(pool); });
}

Result<TransferId> EngineCore::submit_send(const DomainAddress& dst, MrHandle src, uint64_t offset, uint64_t length,
                                           Completion done) {
  SubmitScope scope(*this, OpType::kSend);
  if (!scope.accepting()) return fabric_lib::stopped("engine stopped");
  if (dst.empty()) return invalid_argument("submit_send: empty destination address");
  if (length > options_.max_message_bytes) {
    return invalid_argument("message of " + std::to_string(length) + " bytes exceeds max_message_bytes (" +
                            std::to_string(options_.max_message_bytes) + ")");
  }
  Result<std::shared_ptr<MrEntry>> entry = message_region(src, offset, length, "submit_send");
  if (!entry.ok()) return entry.status();
  RequestPool::Ptr r = requests_->take();
  if (!r) return RequestPool::too_many_requests();
  r->kind = RequestKind::kSend;
  r->completion = std::move(done);
  r->src = std::move(entry).value();
  r->send_offset = offset;
  r->send_length = length;
  r->send_to = dst;
  return enqueue(0, std::move(r), scope);
}

}  // namespace fabric_lib::detail

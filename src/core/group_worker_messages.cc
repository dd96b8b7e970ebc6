// GroupWorker: two-sided messages (sends from registered slots, bouncing receive pools).
#include <cstring>

#include "core/group_worker.h"
#include "base/log.h"

namespace fabric_lib::detail {
namespace {
constexpr size_t kSendSlots = 64;
}  // namespace

transport::PostResult GroupWorker::post_send(Request& r, WrRecord* record, transport::PeerHandle peer, Status* error) {
  transport::Domain& domain = *domains_[0].domain;
  if (r.src) {  // from the caller's registered memory, without a copy
    transport::SendWr wr{r.src->ptr + r.send_offset, r.send_length, r.src->domain_mrs[0].desc, peer,
                         reinterpret_cast<uint64_t>(record)};
    return domain.post_send(wr, error);
  }
  if (!send_slots_.ready()) {
    Status s = send_slots_.init(domain, kSendSlots, config_.max_message_bytes);
    if (!s.ok()) {
      *error = s;
      return transport::PostResult::kFailed;
    }
  }
  const int slot = send_slots_.acquire();
  if (slot < 0) return transport::PostResult::kAgain;
  uint8_t* buf = send_slots_.block().slot(slot);
  if (!r.message.empty()) std::memcpy(buf, r.message.data(), r.message.size());
  transport::SendWr wr{buf, r.message.size(), send_slots_.block().mr.desc, peer, reinterpret_cast<uint64_t>(record)};
  transport::PostResult result = domain.post_send(wr, error);
  if (result == transport::PostResult::kPosted) {
    r.send_slot = slot;
  } else {
    send_slots_.release(slot);
  }
  return result;
}

Status GroupWorker::add_recv_pool(std::shared_ptr<RecvPool> pool) {
  for (RecvSlot& slot : pool->slots) recvs_to_post_.push_back(&slot);
  recv_pools_.push_back(std::move(pool));
  post_recvs_pending();
  return ok_status();
}

bool GroupWorker::post_recvs_pending() {
  size_t posted = 0;
  while (!recvs_to_post_.empty()) {
    RecvSlot* slot = recvs_to_post_.back();
    const RecvPool& pool = *slot->pool;
    transport::RecvWr wr{pool.slot(slot->index), pool.slot_bytes, pool.desc, reinterpret_cast<uint64_t>(slot)};
    Status error;
    const transport::PostResult result = domains_[0].domain->post_recv(wr, &error);
    if (result == transport::PostResult::kAgain) break;
    recvs_to_post_.pop_back();
    if (result == transport::PostResult::kFailed) {
      FL_LOG_ERROR("posting a receive buffer failed: {}", error.to_string());
      if (slot->pool->on_error) {
        dispatcher_.post([pool = slot->pool, error] { pool->on_error(error); });
      }
      continue;
    }
    ++posted;
  }
  return posted > 0;
}

void GroupWorker::on_recv(RecvSlot* slot, const transport::Event& ev) {
  std::shared_ptr<RecvPool> owner;
  for (const auto& p : recv_pools_) {
    if (p.get() == slot->pool) owner = p;
  }
  if (!ev.status.ok()) {
    FL_LOG_WARN("receive failed: {}", ev.status.to_string());
    if (owner->on_error) dispatcher_.post([owner, status = ev.status] { owner->on_error(status); });
    repost(slot);
    return;
  }
  metrics_.events().messages_received.add();
  const uint64_t length = std::min<uint64_t>(ev.length, owner->slot_bytes);
  // The buffer goes back to the worker only after the callback has read it.
  dispatcher_.post([owner, slot, length, inbox = inbox_, this] {
    owner->on_recv(std::span<const uint8_t>(owner->slot(slot->index), length));
    inbox->post([this, slot](bool alive) {
      if (alive) repost(slot);
    });
  });
}

}  // namespace fabric_lib::detail

#include "transport/ipc/message_assembler.h"

#include <algorithm>
#include <cstring>
#include <new>

namespace fabric_lib::transport::ipc {

Status MessageAssembler::add(const Record& r) {
  const RecordHeader& h = r.header;
  const Key key{h.sender, h.value};
  const bool control = (h.flags & kFlagControl) != 0;
  auto it = partial_.find(key);
  if (it == partial_.end()) {
    if (h.offset != 0) return malformed("message fragment at offset " + std::to_string(h.offset) + " without its start");
    if (h.count > kMaxMessageBytes) return malformed("message of " + std::to_string(h.count) + " bytes announced");
    Partial p;
    p.pid = h.sender_pid;
    p.control = control;
    p.total = h.count;
    // The bytes grow as fragments arrive: an announced length alone (any peer can write one slot)
    // must not make us allocate it.
    p.bytes.reserve(std::min<uint64_t>(h.count, kReserveBytes));
    it = partial_.emplace(key, std::move(p)).first;
  }
  Partial& p = it->second;
  const uint64_t received = p.bytes.size();
  const bool fits = h.offset == received && h.count == p.total && control == p.control &&
                    r.payload_len <= p.total - received && (r.payload_len > 0 || p.total == 0);
  if (!fits) {
    partial_.erase(it);
    return malformed("message fragment does not continue its message (offset " + std::to_string(h.offset) + ", " +
                     std::to_string(r.payload_len) + " bytes); message dropped");
  }
  try {
    p.bytes.insert(p.bytes.end(), r.payload, r.payload + r.payload_len);
  } catch (const std::bad_alloc&) {
    partial_.erase(it);
    return resource_exhausted("no memory for a " + std::to_string(h.count) + "-byte message; message dropped");
  }
  if (p.bytes.size() == p.total) {
    waiting_bytes_ += p.bytes.size();
    (p.control ? control_ready_ : app_ready_).push_back(std::move(p.bytes));
    partial_.erase(it);
  }
  return ok_status();
}

bool MessageAssembler::deliverable() const {
  return (!app_ready_.empty() && !app_bufs_.empty()) || (!control_ready_.empty() && !control_bufs_.empty());
}

size_t MessageAssembler::deliver(std::vector<Event>& out, size_t max) {
  size_t n = 0;
  auto drain = [&](std::deque<std::vector<uint8_t>>& ready, std::deque<RecvWr>& bufs, EventKind kind) {
    while (n < max && !ready.empty() && !bufs.empty()) {
      const std::vector<uint8_t>& m = ready.front();
      const RecvWr wr = bufs.front();
      bufs.pop_front();
      const uint64_t copied = std::min<uint64_t>(m.size(), wr.length);
      if (copied) std::memcpy(wr.buf, m.data(), copied);
      Event ev;
      ev.kind = kind;
      ev.context = wr.context;
      ev.length = copied;
      if (copied < m.size()) {
        ev.status = invalid_argument("message of " + std::to_string(m.size()) + " bytes truncated to the " +
                                     std::to_string(wr.length) + "-byte receive buffer");
      }
      waiting_bytes_ -= m.size();
      ready.pop_front();
      out.push_back(std::move(ev));
      ++n;
    }
  };
  drain(control_ready_, control_bufs_, EventKind::kControlRecvDone);
  drain(app_ready_, app_bufs_, EventKind::kRecvDone);
  return n;
}

size_t MessageAssembler::drop_partial_of(const std::function<bool(uint32_t)>& alive) {
  size_t dropped = 0;
  for (auto it = partial_.begin(); it != partial_.end();) {
    if (!alive(it->second.pid)) {
      it = partial_.erase(it);
      ++dropped;
    } else {
      ++it;
    }
  }
  return dropped;
}

}  // namespace fabric_lib::transport::ipc

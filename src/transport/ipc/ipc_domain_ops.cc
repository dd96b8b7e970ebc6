// IpcDomain: operations — posting writes and messages, copies, the per-peer outboxes of imms
// and message fragments, and failing the operations of a peer that is gone.

#include <algorithm>
#include <cstring>

#include "base/clock.h"
#include "base/log.h"
#include "transport/ipc/ipc_domain.h"

namespace fabric_lib::transport::ipc {
namespace {

// Without pidfds, how often a peer's process is looked up in /proc at most.
constexpr int64_t kFullCheckNs = 10'000'000;

// `n` elements of the copy engine's room when it offered that many, else of `own` (grown as
// needed, reused).
template <typename T>
std::span<T> room_or_own(std::span<T> room, std::vector<T>& own, size_t n) {
  if (room.size() >= n) return room.first(n);
  if (own.size() < n) own.resize(n);
  return std::span<T>(own).first(n);
}

}  // namespace

IpcDomain::Peer* IpcDomain::find_peer(PeerHandle handle) {
  auto it = peers_.find(handle);
  return it == peers_.end() ? nullptr : it->second.get();
}

Status IpcDomain::check_peer(Peer* peer, PeerHandle handle) {
  if (!peer || peer->removed) return invalid_argument("ipc: unknown peer handle " + std::to_string(handle));
  return ok_status();
}

PostResult IpcDomain::fail_async(EventKind kind, uint64_t context, Peer& peer) {
  // Posted, and ended at once by a PeerUnreachable event (not a refusal): the worker learns from
  // the event that the path is down.
  const uint32_t op = new_op(kind, context, peer);
  complete(op, peer.why);
  return PostResult::kPosted;
}

uint32_t IpcDomain::new_op(EventKind kind, uint64_t context, Peer& peer) {
  Op* op = ops_.acquire();
  op->kind = kind;
  op->context = context;
  op->peer = &peer;
  ++peer.ops;
  return ops_.index_of(op);
}

void IpcDomain::drop_op(uint32_t i) {
  Op* op = ops_.at(i);
  if (!op) return;
  if (Peer* p = op->peer; p && p->ops > 0) --p->ops;
  ops_.release(op);
}

void IpcDomain::complete(uint32_t i, Status status) {
  Op* op = ops_.at(i);
  if (!op) return;
  // Successful writes that share a context (the engine's runs do) and finish together are
  // reported by one event counting them all.
  if (status.ok() && op->kind == EventKind::kWriteDone && !completed_.empty()) {
    Event& last = completed_.back();
    if (last.kind == EventKind::kWriteDone && last.context == op->context && last.status.ok() &&
        last.count <= UINT32_MAX - op->wrs) {
      last.count += op->wrs;
      drop_op(i);
      return;
    }
  }
  Event ev;
  ev.kind = op->kind;
  ev.context = op->context;
  ev.count = op->wrs;
  ev.status = std::move(status);
  completed_.push_back(std::move(ev));
  drop_op(i);
}

Result<IpcDomain::RemoteRegion*> IpcDomain::resolve_region(Peer& peer, uint64_t rkey, const LocalRegion& src) {
  // The device whose context maps a GPU target and runs the copy: the source's, or for host
  // sources the backend's default one.
  auto device_for = [&](MemoryKind target) -> Result<int> {
    if (target != MemoryKind::kCuda) return -1;
    if (src.kind == MemoryKind::kCuda) return src.device;
    Result<GpuBackend*> backend = gpu();
    if (!backend.ok()) return backend.status();
    return (*backend)->default_device();
  };
  auto it = peer.regions.find(rkey);
  if (it != peer.regions.end()) {
    // One load: is the key still registered there? (A region unregistered and freed must not be
    // written through a stale mapping.)
    if (peer.segment->key_live(rkey)) {
      Result<int> device = device_for(it->second.info.kind);
      if (!device.ok()) return device.status();
      if (it->second.device == *device) return &it->second;
    }
    drop_region(peer, rkey);
  }
  Result<RegionInfo> info = peer.segment->lookup_region(rkey);
  if (!info.ok()) {
    return Status(info.status().code() == ErrorCode::kNotFound ? ErrorCode::kInvalidArgument : info.status().code(),
                  "ipc: " + info.status().message());
  }
  Result<int> device = device_for(info->kind);
  if (!device.ok()) return device.status();
  RemoteRegion region;
  region.info = *info;
  region.device = *device;
  if (info->kind == MemoryKind::kCuda) {
    if (peer.address.owner.pid == self_.pid) {
      region.mapped = reinterpret_cast<uint8_t*>(info->base);  // our own allocation: no IPC needed
    } else {
      ImportKey key{std::string(reinterpret_cast<const char*>(info->ipc_handle), sizeof(info->ipc_handle)), *device};
      Import& import = peer.imports[key];
      if (!import.base) {
        Result<void*> base = gpu_->open_import(*info, *device);
        if (!base.ok()) {
          peer.imports.erase(key);
          return base.status();
        }
        import.base = *base;
        import.device = *device;
      }
      ++import.refs;
      region.import = std::move(key);
      region.mapped = static_cast<uint8_t*>(import.base) + info->alloc_offset;
    }
  }
  return &peer.regions.emplace(rkey, std::move(region)).first->second;
}

void IpcDomain::drop_region(Peer& peer, uint64_t rkey) {
  auto it = peer.regions.find(rkey);
  if (it == peer.regions.end()) return;
  if (!it->second.import.first.empty()) {
    auto imp = peer.imports.find(it->second.import);
    if (imp != peer.imports.end() && --imp->second.refs == 0) {
      if (gpu_) gpu_->close_import(imp->second.base, imp->second.device);
      peer.imports.erase(imp);
    }
  }
  peer.regions.erase(it);
}

PostResult IpcDomain::post_write(const WriteWr& wr, Status* error) {
  Peer* peer = find_peer(wr.peer);
  if (Status s = check_peer(peer, wr.peer); !s.ok()) {
    if (error) *error = std::move(s);
    return PostResult::kFailed;
  }
  if (ops_.in_use() >= options_.max_inflight) return PostResult::kAgain;
  if (peer->dead) return fail_async(EventKind::kWriteDone, wr.context, *peer);
  auto fail = [&](Status s) {
    if (error) *error = std::move(s);
    return PostResult::kFailed;
  };
  if (wr.length == 0) {
    // Imm-only: no bytes, but the key must name a live region at the target (as on a NIC).
    if (!peer->segment->key_live(wr.rkey)) {
      Result<RegionInfo> info = peer->segment->lookup_region(wr.rkey);
      return fail(invalid_argument("ipc: " + info.status().message()));
    }
    const uint32_t op = new_op(EventKind::kWriteDone, wr.context, *peer);
    if (!wr.has_imm) {
      complete(op, ok_status());
      return PostResult::kPosted;
    }
    ops_.at(op)->has_imm = true;
    ops_.at(op)->imm = wr.imm;
    ops_.at(op)->imms = std::max<uint16_t>(wr.imm_count, 1);
    OutItem item;
    item.op = op;
    item.imm = true;
    item.count = ops_.at(op)->imms;
    item.imm_value = wr.imm;
    queue_out(*peer, item);
    pump_outbox(*peer);  // imm latency: push right away when the ring has room
    return PostResult::kPosted;
  }

  const auto* src = static_cast<const LocalRegion*>(wr.src_desc);
  if (!src) return fail(invalid_argument("ipc: write source outside its registered region"));
  Result<RemoteRegion*> dst = resolve_region(*peer, wr.rkey, *src);
  if (!dst.ok()) return fail(dst.status());
  return post_copy(*peer, wr, *src, **dst, error);
}

Status IpcDomain::check_ranges(const WriteWr& wr, const LocalRegion& src, const RegionInfo& target) {
  const auto* s = static_cast<const uint8_t*>(wr.src);
  if (!s || s < src.base || wr.length > src.length || s - src.base > static_cast<ptrdiff_t>(src.length - wr.length)) {
    return invalid_argument("ipc: write source outside its registered region");
  }
  if (wr.remote_addr > target.length || wr.length > target.length - wr.remote_addr) {
    return out_of_range("ipc: write of " + std::to_string(wr.length) + " bytes at offset " + std::to_string(wr.remote_addr) +
                        " exceeds the peer's " + std::to_string(target.length) + "-byte region");
  }
  return ok_status();
}

PostResult IpcDomain::post_copy(Peer& peer, const WriteWr& wr, const LocalRegion& src, const RemoteRegion& dst,
                                Status* error) {
  if (Status s = check_ranges(wr, src, dst.info); !s.ok()) {
    if (error) *error = std::move(s);
    return PostResult::kFailed;
  }
  return start_copy(peer, std::span<const WriteWr>(&wr, 1), src, dst, error);
}

PostResult IpcDomain::start_copy(Peer& peer, std::span<const WriteWr> wrs, const LocalRegion& src,
                                 const RemoteRegion& dst, Status* error) {
  const WriteWr& wr = wrs.front();
  CopyShape shape{static_cast<uint32_t>(wrs.size()), wr.context, wr.has_imm, wr.imm, wr.length, 0};
  for (const WriteWr& w : wrs) shape.imms += std::max<uint16_t>(w.imm_count, 1);  // (<= 2^16 WRs of < 2^16 each: fits)
  // One WR, or WRs that continue each other on both sides (a write's shards): one plain copy.
  size_t contiguous = 1;
  while (contiguous < wrs.size() && continues(wrs[contiguous - 1], wrs[contiguous])) ++contiguous;
  if (contiguous == wrs.size()) {
    shape.length = wrs.back().remote_addr + wrs.back().length - wr.remote_addr;
    return submit_copy(peer, shape, static_cast<const uint8_t*>(wr.src), wr.remote_addr, {}, src, dst, error);
  }
  // A gather: each WR a segment, relative to both regions' bases.
  const std::span<gpu::CopySegment> segments = gather_space(wrs.size(), dst);
  for (size_t i = 0; i < wrs.size(); ++i) {
    segments[i] = {static_cast<uint64_t>(static_cast<const uint8_t*>(wrs[i].src) - src.base), wrs[i].remote_addr};
  }
  return submit_copy(peer, shape, src.base, 0, Gather{segments}, src, dst, error);
}

std::span<gpu::CopySegment> IpcDomain::gather_space(size_t n, const RemoteRegion& dst) {
  const bool gpu_target = dst.info.kind != MemoryKind::kHost && gpu_;
  return room_or_own(gpu_target ? gpu_->copies().segment_room(n) : std::span<gpu::CopySegment>(), segments_, n);
}

std::span<gpu::CopyPagePair> IpcDomain::page_space(size_t n, const RemoteRegion& dst) {
  const bool gpu_target = dst.info.kind != MemoryKind::kHost && gpu_;
  return room_or_own(gpu_target ? gpu_->copies().page_room(n) : std::span<gpu::CopyPagePair>(), pages_, n);
}

PostResult IpcDomain::submit_copy(Peer& peer, const CopyShape& shape, const uint8_t* from, uint64_t dst_offset,
                                  const Gather& gather, const LocalRegion& src, const RemoteRegion& dst,
                                  Status* error) {
  const uint32_t op = new_op(EventKind::kWriteDone, shape.context, peer);
  Op& o = *ops_.at(op);
  o.has_imm = shape.has_imm;
  o.imm = shape.imm;
  o.wrs = shape.wrs;
  o.imms = shape.imms;
  gpu::CopyRequest copy;
  copy.op = op;
  copy.src = from;
  copy.src_kind = src.kind;
  copy.src_device = src.device;
  copy.length = shape.length;
  copy.segments = gather.segments;
  copy.pages = gather.pages;
  copy.src_stride = gather.src_stride;
  copy.dst_stride = gather.dst_stride;
  const RegionInfo& target = dst.info;
  gpu::CopySubmit result;
  Status why;
  if (target.kind == MemoryKind::kHost) {
    copy.dst_pid = peer.address.owner.pid;
    copy.dst_addr = target.base + dst_offset;
    result = host_copies_.submit(copy, &why);
  } else {
    copy.dst_ptr = dst.mapped + dst_offset;
    copy.dst_kind = MemoryKind::kCuda;
    copy.dst_device = dst.device;
    // One source region into one mapped target region: contiguous plain copies may merge (the
    // shards of a write over a group's domains, which share the engine).
    if (!gpu::is_gather(copy)) copy.merge_group = ((reinterpret_cast<uint64_t>(src.base) * 0x9E3779B97F4A7C15ull) ^ reinterpret_cast<uint64_t>(dst.mapped)) | 1;
    result = gpu_ ? gpu_->copies().submit(copy, &why) : gpu::CopySubmit::kFailed;
    if (!gpu_) why = unsupported("ipc: GPU targets need the CUDA backend");
  }
  if (result != gpu::CopySubmit::kAccepted) {
    drop_op(op);  // not accepted: the op disappears without an event
    if (result == gpu::CopySubmit::kAgain) return PostResult::kAgain;
    if (error) *error = std::move(why);
    return PostResult::kFailed;
  }
  return PostResult::kPosted;
}

PostResult IpcDomain::enqueue_message(const SendWr& wr, bool control, EventKind kind, Status* error) {
  Peer* peer = find_peer(wr.peer);
  if (Status s = check_peer(peer, wr.peer); !s.ok()) {
    if (error) *error = std::move(s);
    return PostResult::kFailed;
  }
  if (wr.length > kMaxMessageBytes || (wr.length > 0 && wr.buf == nullptr)) {
    if (error) *error = invalid_argument("ipc: message of " + std::to_string(wr.length) + " bytes");
    return PostResult::kFailed;
  }
  if (ops_.in_use() >= options_.max_inflight) return PostResult::kAgain;
  if (peer->dead) return fail_async(kind, wr.context, *peer);
  const uint32_t op = new_op(kind, wr.context, *peer);
  OutItem item;
  item.op = op;
  item.control = control;
  item.bytes = static_cast<const uint8_t*>(wr.buf);
  item.length = wr.length;
  item.seq = peer->next_seq++;
  queue_out(*peer, item);
  pump_outbox(*peer);
  return PostResult::kPosted;
}

PostResult IpcDomain::post_send(const SendWr& wr, Status* error) {
  return enqueue_message(wr, false, EventKind::kSendDone, error);
}

PostResult IpcDomain::post_control_send(const SendWr& wr, Status* error) {
  return enqueue_message(wr, true, EventKind::kControlSendDone, error);
}

PostResult IpcDomain::post_recv(const RecvWr& wr, Status* error) {
  if (wr.length > 0 && wr.buf == nullptr) {
    if (error) *error = invalid_argument("ipc: receive buffer without memory");
    return PostResult::kFailed;
  }
  assembler_.post_recv(false, wr);
  return PostResult::kPosted;
}

PostResult IpcDomain::post_control_recv(const RecvWr& wr, Status* error) {
  if (wr.length > 0 && wr.buf == nullptr) {
    if (error) *error = invalid_argument("ipc: control buffer without memory");
    return PostResult::kFailed;
  }
  assembler_.post_recv(true, wr);
  return PostResult::kPosted;
}

bool IpcDomain::owner_exited(Peer& peer) {
  if (peer.dead) return true;
  if (!peer.segment || peer.address.owner.pid == self_.pid) return false;
  bool exited = false;
  if (peer.watch_fd >= 0) {
    if (peer.checked_pass == pass_) return peer.exited_seen;
    peer.checked_pass = pass_;
    exited = peer.exited_seen = watched_process_exited(peer.watch_fd);
  } else {
    const int64_t now = monotonic_ns();
    if (now - peer.last_check_ns < kFullCheckNs) return false;
    peer.last_check_ns = now;
    exited = !process_alive(peer.address.owner.pid, peer.address.owner.start_time);
  }
  if (exited) {
    peer_failed(peer, Status(ErrorCode::kPeerUnreachable, "the peer process " + std::to_string(peer.address.owner.pid) + " has exited"));
  }
  return exited;
}

bool IpcDomain::pump_outbox(Peer& peer) {
  if (peer.dead || peer.outbox.empty()) return false;
  // Imms and messages for a process that is gone must fail, not vanish into its orphaned ring
  // (a GPU copy into its memory may well have "succeeded").
  if (owner_exited(peer)) return false;
  bool pushed = false;
  bool full = false;
  while (!peer.outbox.empty() && !full) {
    OutItem& item = peer.outbox.front();
    if (item.imm) {
      if (!push_imm_record(peer)) {
        if (peer.dead) return pushed;  // closed: its outbox was failed
        break;                         // full
      }
      pushed = true;
      continue;
    }
    RecordHeader h;
    h.sender = sender_token_;
    h.sender_pid = self_.pid;
    h.type = RecordType::kFragment;
    h.flags = item.control ? kFlagControl : 0;
    h.value = item.seq;
    h.count = static_cast<uint32_t>(item.length);
    while (!item.started || item.sent < item.length) {
      const uint64_t chunk = std::min<uint64_t>(kSlotPayloadBytes, item.length - item.sent);
      h.offset = static_cast<uint32_t>(item.sent);
      const RingProducer::Push r = peer.producer.push(h, std::span<const uint8_t>(item.bytes + item.sent, chunk));
      if (r == RingProducer::Push::kClosed) {
        peer_failed(peer, Status(ErrorCode::kPeerUnreachable, "the peer closed its ipc domain"));
        return pushed;
      }
      if (r == RingProducer::Push::kFull) {
        full = true;
        break;
      }
      pushed = true;
      item.started = true;
      item.sent += chunk;
    }
    if (full) break;
    complete(item.op, ok_status());
    peer.outbox.pop_front();
    --outbox_items_;
  }
  if (pushed) peer.segment->wake_owner();
  return pushed;
}

bool IpcDomain::push_imm_record(Peer& peer) {
  // Equal imms queued one after another (single WRs' and runs') go as one record.
  const uint32_t value = peer.outbox.front().imm_value;
  uint64_t arrivals = 0;
  for (size_t k = 0; k < peer.outbox.size() && arrivals < kMaxImmRecordCount; ++k) {
    const OutItem& next = peer.outbox[k];
    if (!next.imm || next.imm_value != value) break;
    arrivals += next.count;
  }
  RecordHeader h;
  h.sender = sender_token_;
  h.sender_pid = self_.pid;
  h.type = RecordType::kImm;
  h.value = value;
  h.count = static_cast<uint32_t>(std::min<uint64_t>(arrivals, kMaxImmRecordCount));
  const RingProducer::Push r = peer.producer.push(h);
  if (r == RingProducer::Push::kClosed) {
    peer_failed(peer, Status(ErrorCode::kPeerUnreachable, "the peer closed its ipc domain"));
    return false;
  }
  if (r == RingProducer::Push::kFull) return false;
  // An item completes once all its arrivals are out; one too large for this record (a run of
  // more than kMaxImmRecordCount WRs) keeps the rest for the next.
  for (uint32_t left = h.count; left > 0;) {
    OutItem& front = peer.outbox.front();
    const uint32_t n = std::min(left, front.count);
    front.count -= n;
    left -= n;
    if (front.count > 0) break;
    complete(front.op, ok_status());
    peer.outbox.pop_front();
    --outbox_items_;
  }
  return true;
}

void IpcDomain::queue_out(Peer& peer, const OutItem& item) {
  peer.outbox.push_back(item);
  ++outbox_items_;
  if (!peer.listed) {
    peer.listed = true;
    outbox_peers_.push_back(&peer);
  }
}

bool IpcDomain::pump_outboxes() {
  if (outbox_items_ == 0) return false;
  // Only the peers with something queued (a poll with imms to send walked all peers: 64 of them
  // cost ~70 ns a poll); a peer leaves the list once its outbox is empty.
  bool any = false;
  size_t kept = 0;
  for (size_t i = 0; i < outbox_peers_.size(); ++i) {
    Peer* peer = outbox_peers_[i];
    any |= pump_outbox(*peer);
    if (peer->outbox.empty()) {
      peer->listed = false;
    } else {
      outbox_peers_[kept++] = peer;
    }
  }
  outbox_peers_.resize(kept);
  return any;
}

bool IpcDomain::progress_copies() {
  copy_done_.clear();
  if (host_copies_.inflight()) host_copies_.progress(copy_done_);
  if (gpu_) gpu_->copies().progress(copy_done_);
  for (gpu::CopyDone& d : copy_done_) {
    const uint32_t i = static_cast<uint32_t>(d.op);
    Op* found = ops_.at(i);
    if (!found) continue;
    Op& op = *found;
    Peer* peer = op.peer;
    if (!d.status.ok()) {
      if (peer && d.status.code() == ErrorCode::kPeerUnreachable && !peer->dead) peer_failed(*peer, d.status);
      complete(i, std::move(d.status));
      continue;
    }
    if (!peer || peer->dead || owner_exited(*peer)) {
      complete(i, peer ? peer->why : Status(ErrorCode::kPeerUnreachable, "the peer was removed"));
      continue;
    }
    if (!op.has_imm) {
      complete(i, ok_status());
      continue;
    }
    // The bytes are in the target's memory: only now may its imm go (data before imm).
    OutItem item;
    item.op = i;
    item.imm = true;
    item.count = op.imms;  // a run's imms: one item, one record (or a few: kMaxImmRecordCount)
    item.imm_value = op.imm;
    queue_out(*peer, item);
  }
  return !copy_done_.empty();
}

void IpcDomain::peer_failed(Peer& peer, const Status& why) {
  if (peer.dead) return;
  peer.dead = true;
  peer.why = Status(ErrorCode::kPeerUnreachable, why.message());
  FL_LOG_DEBUG("ipc domain {}: peer {} ({}) failed: {}", segment_->name(), peer.handle, peer.address.segment_name, why.message());
  // Queued imms and messages can never be delivered; copies still running end as they finish.
  while (!peer.outbox.empty()) {
    complete(peer.outbox.front().op, peer.why);
    peer.outbox.pop_front();
    --outbox_items_;
  }
}

bool IpcDomain::sweep_peers(int64_t now) {
  bool any = false;
  for (auto& [handle, peer] : peers_) {
    if (peer->dead || peer->ops == 0 || !peer->segment) continue;
    if (peer->segment->closed()) {
      peer_failed(*peer, Status(ErrorCode::kPeerUnreachable, "the peer closed its ipc domain"));
      any = true;
    } else if (peer->address.owner.pid != self_.pid && !process_alive(peer->address.owner.pid, peer->address.owner.start_time)) {
      peer_failed(*peer, Status(ErrorCode::kPeerUnreachable, "the peer process " + std::to_string(peer->address.owner.pid) + " has exited"));
      any = true;
    }
    peer->last_check_ns = now;
  }
  return any;
}

void IpcDomain::release_removed_peers() {
  if (removed_peers_ == 0) return;  // every poll calls this: no walk over all peers for nothing
  std::vector<PeerHandle> gone;
  for (auto& [handle, peer] : peers_) {
    if (peer->removed && peer->ops == 0) gone.push_back(handle);
  }
  for (PeerHandle h : gone) maybe_release(*peers_.at(h));
}

}  // namespace fabric_lib::transport::ipc

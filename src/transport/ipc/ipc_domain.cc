// IpcDomain: opening, registration (the owner's table), peers (attaching their segments).
#include "transport/ipc/ipc_domain.h"

#include <unistd.h>

#include <algorithm>
#include <random>

#include "base/log.h"

namespace fabric_lib::transport::ipc {

Result<std::unique_ptr<IpcDomain>> IpcDomain::open(IpcOptions options) {
  std::unique_ptr<IpcDomain> domain(new IpcDomain());
  Status status = domain->open_resources(std::move(options));
  if (!status.ok()) return status;
  return domain;
}

Status IpcDomain::open_resources(IpcOptions options) {
  options_ = std::move(options);
  if (options_.max_inflight == 0) return invalid_argument("ipc: max_inflight must be >= 1");
  Result<ProcessIdentity> self = self_identity();
  if (!self.ok()) return self.status();
  self_ = *self;
  if (self_.pid > kPidMask) return unsupported("ipc: pid " + std::to_string(self_.pid) + " does not fit the ring's 22-bit pid field");
  Result<std::unique_ptr<ShmSegment>> segment = ShmSegment::create(self_, options_.geometry);
  if (!segment.ok()) return segment.status();
  segment_ = std::move(segment).value();
  consumer_ = RingConsumer(segment_->ring());
  host_copies_ = HostCopyEngine(options_.host_copies);
  sender_token_ = (std::random_device{}() * 0x9E3779B97F4A7C15ull) ^ segment_->nonce() ^ (uint64_t{self_.pid} << 40);

  IpcAddress a{self_, segment_->nonce(), segment_->name()};
  address_ = a.encode();
  info_.transport = TransportKind::kSameHostIpc;
  info_.provider = "ipc";
  info_.fabric = "host " + boot_id_text(self_.boot_id);
  info_.name = segment_->name();
  info_.max_inflight = std::max(options_.max_inflight, options_.max_inflight_wrs);
  info_.max_msg_bytes = kMaxMessageBytes;
  // One poll issues every copy posted since the last as one batch (a kernel launch and one event
  // per stream, shared by the group's domains): at 64 WRs a pass that fixed cost held paged writes
  // to ~3 Mpages/s on an H200, at 1024 a request of 4096 pages took four passes (docs/gpu.md).
  info_.wrs_per_pass = std::min<size_t>(4096, std::max<size_t>(64, info_.max_inflight / 4));
  info_.one_medium = true;
  info_.takes_imm_count = true;
  info_.posts_issued_by_poll = true;
  info_.delivery_complete = true;
  info_.hmem = static_cast<bool>(options_.gpu);
  FL_LOG_DEBUG("opened ipc domain {} (ring {} slots, table {} entries, GPU {})", segment_->name(),
               options_.geometry.slots, options_.geometry.table_entries, info_.hmem ? "yes" : "no");
  return ok_status();
}

IpcDomain::~IpcDomain() {
  // Copies already running must end before their memory (and the mappings) go away.
  if (gpu_) gpu_->copies().drain();
  host_copies_.drain();
  for (auto& [handle, peer] : peers_) {
    for (auto& [key, import] : peer->imports) {
      if (gpu_ && import.base) gpu_->close_import(import.base, import.device);
    }
  }
  outbox_peers_.clear();
  peers_.clear();
  gpu_.reset();
}

Result<GpuBackend*> IpcDomain::gpu() {
  if (gpu_) return gpu_.get();
  if (!options_.gpu) {
    return unsupported("GPU memory over ipc needs a CUDA build of fabric-lib (this one was built with "
                       "FABRIC_LIB_CUDA=OFF or without nvcc)");
  }
  if (!gpu_error_.ok()) return gpu_error_;
  Result<std::unique_ptr<GpuBackend>> made = options_.gpu();
  if (!made.ok()) {
    gpu_error_ = made.status();
    return gpu_error_;
  }
  gpu_ = std::move(made).value();
  // GPU sources into peers' host memory read their bytes through the backend.
  host_copies_.set_device_reader([backend = gpu_.get()](void* dst, const void* src, uint64_t length, int device) {
    return backend->copy_to_host(dst, src, length, device);
  });
  return gpu_.get();
}

Result<DomainMr> IpcDomain::register_memory(void* ptr, size_t length, Access access, MemoryKind kind) {
  if (ptr == nullptr || length == 0) return invalid_argument("ipc: registration of an empty range");
  if (kind != MemoryKind::kHost && kind != MemoryKind::kCuda) {
    return invalid_argument("domain registration takes host or CUDA memory (resolve kAuto first)");
  }
  auto region = std::make_unique<LocalRegion>();
  region->id = next_region_id_++;
  region->base = static_cast<uint8_t*>(ptr);
  region->length = length;
  region->kind = kind;
  const bool remote = has_access(access, Access::kRemoteWrite) || has_access(access, Access::kRemoteRead);
  RegionInfo info;
  info.base = reinterpret_cast<uint64_t>(ptr);
  info.length = length;
  info.kind = kind;
  if (kind == MemoryKind::kCuda) {
    Result<GpuBackend*> backend = gpu();
    if (!backend.ok()) return backend.status();
    Result<GpuExport> exported = (*backend)->export_region(ptr, length, remote);
    if (!exported.ok()) return exported.status();
    region->device = exported->device;
    info.device = exported->device;
    info.alloc_offset = exported->alloc_offset;
    std::memcpy(info.ipc_handle, exported->ipc_handle, sizeof(info.ipc_handle));
  }
  if (remote) {
    if (kind == MemoryKind::kHost) allow_host_writes_from_peers();
    uint64_t slot;
    if (!free_table_slots_.empty()) {
      slot = free_table_slots_.back();
      free_table_slots_.pop_back();
    } else if (next_table_slot_ < segment_->table_entries()) {
      slot = next_table_slot_++;
    } else {
      return resource_exhausted("ipc: " + std::to_string(segment_->table_entries()) +
                                " regions are registered for remote access on this domain; unregister some first");
    }
    region->table_slot = slot;
    region->key = make_key(slot, ++key_generation_, segment_->table_entries());
    info.key = region->key;
    segment_->publish_region(slot, info);
  }
  DomainMr mr;
  mr.id = region->id;
  mr.desc = region.get();
  mr.rkey = region->key;
  mr.addr_base = 0;  // remote addresses are offsets into the region
  regions_.emplace(region->id, std::move(region));
  return mr;
}

void IpcDomain::unregister_memory(uint64_t mr_id) {
  auto it = regions_.find(mr_id);
  if (it == regions_.end()) return;
  if (it->second->table_slot != UINT64_MAX) {
    segment_->clear_region(it->second->table_slot);
    free_table_slots_.push_back(it->second->table_slot);
  }
  regions_.erase(it);
}

Result<PeerHandle> IpcDomain::add_peer(std::span<const uint8_t> address) {
  Result<IpcAddress> decoded = IpcAddress::decode(address);
  if (!decoded.ok()) return decoded.status();
  FABRIC_LIB_RETURN_IF_ERROR(check_reachable(*decoded, self_));
  Result<std::unique_ptr<ShmSegment>> segment = ShmSegment::attach(*decoded);
  // A peer that is gone (exited, closed) still gets a handle: its operations then fail with
  // PeerUnreachable events, as a connection error would on a NIC, so the worker fails the path.
  if (!segment.ok() && segment.status().code() != ErrorCode::kPeerUnreachable) return segment.status();
  auto peer = std::make_unique<Peer>();
  peer->handle = next_peer_++;
  peer->address = *decoded;
  if (segment.ok()) {
    peer->segment = std::move(segment).value();
    peer->producer = RingProducer(peer->segment->ring(), self_.pid);
    if (decoded->owner.pid != self_.pid) peer->watch_fd = open_process_watch(decoded->owner.pid, decoded->owner.start_time);
  } else {
    peer->dead = true;
    peer->why = segment.status();
  }
  const PeerHandle handle = peer->handle;
  peers_.emplace(handle, std::move(peer));
  return handle;
}

void IpcDomain::remove_peer(PeerHandle handle) {
  Peer* peer = find_peer(handle);
  if (!peer) return;
  if (!peer->removed) ++removed_peers_;
  peer->removed = true;
  // Nothing more may reach it (the handle is gone for the caller); ops still copying end as they finish.
  if (!peer->dead) peer_failed(*peer, Status(ErrorCode::kPeerUnreachable, "the peer was removed"));
  maybe_release(*peer);
}

IpcDomain::Peer::~Peer() {
  if (watch_fd >= 0) close(watch_fd);
}

void IpcDomain::maybe_release(Peer& peer) {
  if (!peer.removed || peer.ops != 0) return;
  --removed_peers_;
  if (peer.listed) std::erase(outbox_peers_, &peer);  // its outbox was emptied by peer_failed
  for (auto& [key, import] : peer.imports) {
    if (gpu_ && import.base) gpu_->close_import(import.base, import.device);
  }
  peers_.erase(peer.handle);
}

size_t IpcDomain::imports_open() const {
  size_t n = 0;
  for (const auto& [handle, peer] : peers_) n += peer->imports.size();
  return n;
}

}  // namespace fabric_lib::transport::ipc

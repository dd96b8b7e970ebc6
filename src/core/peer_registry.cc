#include "core/peer_registry.h"

#include <algorithm>

#include "base/identity_slot.h"
#include "core/worker_metrics.h"

namespace fabric_lib::detail {

size_t PeerEntry::paths_up() const {
  size_t n = 0;
  for (const Path& p : paths) n += p.usable() ? 1 : 0;
  return n;
}

bool PeerEntry::any_inflight() const {
  for (const Path& p : paths) {
    if (p.inflight > 0) return true;
  }
  return false;
}

PeerEntry& PeerRegistry::entry(std::span<const uint8_t> key) {
  if (last_ && std::ranges::equal(last_->key, key)) return *last_;
  const std::string_view k(reinterpret_cast<const char*>(key.data()), key.size());
  auto it = peers_.find(k);
  if (it != peers_.end()) return *(last_ = it->second.get());
  auto peer = std::make_unique<PeerEntry>();
  peer->key.assign(key.begin(), key.end());
  peer->paths.resize(domains_);
  peer->paths[0].address = peer->key;
  if (metrics_) peer->metrics = metrics_->add_peer(peer->key, domains_);
  PeerEntry& ref = *peer;
  peers_.emplace(std::string(k), std::move(peer));
  last_ = &ref;
  return ref;
}

PeerEntry* PeerRegistry::find(std::span<const uint8_t> key) {
  const std::string_view k(reinterpret_cast<const char*>(key.data()), key.size());
  auto it = peers_.find(k);
  return it == peers_.end() ? nullptr : it->second.get();
}

PeerEntry& PeerRegistry::for_desc(const MrDesc& desc, std::vector<transport::Domain*>& domains) {
  // A descriptor's identity (MrDesc::identity) is the same for every copy and unique while any
  // copy is alive; the slot's copy keeps it alive.
  const void* identity = desc.identity();
  DescSlot& slot = desc_cache_[identity_slot<kDescSlotBits>(identity)];
  if (slot.peer && slot.desc.identity() == identity && slot.peer->address_epoch == slot.epoch) return *slot.peer;
  PeerEntry& peer = entry(desc.domain(0).address.bytes());
  for (size_t d = 1; d < domains_ && d < desc.num_domains(); ++d) {
    set_address(peer, d, desc.domain(d).address.bytes(), *domains[d]);
  }
  // One without domains names no peer to remember (submits refuse those before they get here).
  if (desc.num_domains() > 0) slot = {desc, &peer, peer.address_epoch};
  return peer;
}

void PeerRegistry::set_address(PeerEntry& peer, size_t d, std::span<const uint8_t> address,
                               transport::Domain& domain) {
  Path& path = peer.paths[d];
  if (std::ranges::equal(path.address, address)) return;
  drop_handle(peer, d, domain);
  path.address.assign(address.begin(), address.end());
  ++peer.address_epoch;
}

PeerEntry& PeerRegistry::for_main_address(std::span<const uint8_t> address) { return entry(address); }

Result<transport::PeerHandle> PeerRegistry::handle(PeerEntry& peer, size_t d, transport::Domain& domain) {
  Path& path = peer.paths[d];
  if (path.inserted) return path.handle;
  if (path.address.empty()) {
    return Status(ErrorCode::kInvalidArgument, "no address known for domain " + std::to_string(d) + " of this peer");
  }
  Result<transport::PeerHandle> h = domain.add_peer(path.address);
  if (!h.ok()) return h.status();
  path.handle = *h;
  path.inserted = true;
  return path.handle;
}

void PeerRegistry::drop_handle(PeerEntry& peer, size_t d, transport::Domain& domain) {
  Path& path = peer.paths[d];
  if (!path.inserted) return;
  if (path.provider_ops > 0) {
    path.remove_when_idle = true;  // keep using the handle meanwhile
    return;
  }
  domain.remove_peer(path.handle);
  path.inserted = false;
  path.remove_when_idle = false;
}

void PeerRegistry::op_done(PeerEntry& peer, size_t d, transport::Domain& domain, uint32_t wrs) {
  Path& path = peer.paths[d];
  path.provider_ops -= std::min<uint64_t>(path.provider_ops, wrs);
  if (path.provider_ops == 0 && path.remove_when_idle) drop_handle(peer, d, domain);
}

}  // namespace fabric_lib::detail

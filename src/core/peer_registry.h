// The peers a group's worker talks to, and the health of every path to them.
//
// A peer is a remote group, keyed by the address of its domain 0. A path is (local domain d,
// the peer's domain d): local domain i always talks to the peer's domain i. Each path knows its
// provider handle (inserted lazily), whether it is up, and the WRs in flight on it, so a failed
// path can abandon exactly those WRs. Worker thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "fabric_lib/status.h"
#include "fabric_lib/health.h"
#include "fabric_lib/memory.h"
#include "base/slab_pool.h"
#include "transport/domain.h"

namespace fabric_lib::detail {

struct Request;
struct PeerEntry;
struct PeerCells;
class WorkerMetrics;

// One WR handed to a domain: the completion event's context.
struct WrRecord {
  Request* request = nullptr;
  PeerEntry* peer = nullptr;
  uint32_t domain = 0;
  uint8_t op = 0;          // the request's OpType (the request may be gone when an abandoned WR returns)
  bool abandoned = false;  // its path failed: the request no longer waits for it
  // WRs it stands for that the provider has not reported yet: 1, or a run's length (a paged
  // write's pages posted together, all of one length and to one peer: GroupWorker::post_run).
  uint32_t outstanding = 1;
  uint64_t bytes = 0;      // payload of each of its WRs
  int64_t posted_ns = 0;   // when it was posted (metrics on)
  WrRecord* prev = nullptr;
  WrRecord* next = nullptr;
};

// Intrusive list of the WRs in flight on one path.
class WrList {
 public:
  void push(WrRecord* r) {
    r->prev = nullptr;
    r->next = head_;
    if (head_) head_->prev = r;
    head_ = r;
  }
  void erase(WrRecord* r) {
    if (r->prev) r->prev->next = r->next;
    if (r->next) r->next->prev = r->prev;
    if (head_ == r) head_ = r->next;
    r->prev = r->next = nullptr;
  }
  WrRecord* head() const { return head_; }

 private:
  WrRecord* head_ = nullptr;
};

// WR records come from a SlabPool (base/slab_pool.h): their addresses travel as WR contexts.
using WrRecordPool = SlabPool<WrRecord, 512>;

struct Path {
  std::vector<uint8_t> address;  // the peer's domain address (empty: not known yet)
  transport::PeerHandle handle = 0;
  bool inserted = false;
  bool up = true;
  uint32_t inflight = 0;
  // Operations the provider still holds on this path's handle: WRs (abandoned ones too) and
  // control messages. The handle is removed from the address vector only when this is 0: some
  // providers (shm) crash if an address vanishes under their pending operations.
  uint32_t provider_ops = 0;
  bool remove_when_idle = false;
  int64_t last_progress_ns = 0;  // last completion (or start of activity) on this path
  int64_t blocked_since_ns = 0;  // the provider has refused WRs (EAGAIN) on it since then
  WrList wrs;
  // Liveness probe.
  uint64_t probe_seq = 0;        // the ping awaiting its pong (0: none)
  uint32_t probe_misses = 0;
  uint32_t recovery_probes = 0;  // pings sent while down (bounded)

  // Up, and its address is known (a peer learnt from a send knows only domain 0's).
  bool usable() const { return up && !address.empty(); }
};

struct PeerEntry {
  std::vector<uint8_t> key;  // domain-0 address of the remote group
  std::vector<Path> paths;   // one per local domain
  // Bumped whenever a path's address changes (PeerRegistry::set_address): a descriptor resolved
  // at this epoch still matches every path's address.
  uint64_t address_epoch = 0;
  PeerHealth health = PeerHealth::kHealthy;
  int64_t unreachable_since_ns = 0;
  Status last_error;
  PeerCells* metrics = nullptr;  // its metrics (null while metrics are off)

  size_t paths_up() const;  // usable paths
  bool any_inflight() const;
};

class PeerRegistry {
 public:
  // `metrics`: where new peers get their metrics cells (may be null).
  PeerRegistry(size_t domains, WorkerMetrics* metrics) : domains_(domains), metrics_(metrics) {}

  // The peer that owns the descriptor's region; learns or refreshes its path addresses. A
  // descriptor seen before (the same MrDesc object, copies included) whose peer's addresses have
  // not changed since is answered from a small cache, without hashing or comparing addresses.
  PeerEntry& for_desc(const MrDesc& desc, std::vector<transport::Domain*>& domains);
  // The peer whose domain-0 address is `address` (sends know only that one).
  PeerEntry& for_main_address(std::span<const uint8_t> address);
  // The provider handle of path d, inserting the address on first use.
  Result<transport::PeerHandle> handle(PeerEntry& peer, size_t d, transport::Domain& domain);
  // Points path d at `address` when it differs (a restarted peer keeps domain 0's address but
  // not always the others): the old handle goes (drop_handle) and the peer's address_epoch moves.
  void set_address(PeerEntry& peer, size_t d, std::span<const uint8_t> address, transport::Domain& domain);
  // Removes the path's address from its domain (now, or once the provider holds no operation on
  // it); the next use after that inserts it afresh.
  void drop_handle(PeerEntry& peer, size_t d, transport::Domain& domain);
  // Bookkeeping of provider_ops; the last one out completes a deferred drop_handle().
  void op_posted(PeerEntry& peer, size_t d, uint32_t wrs = 1) { peer.paths[d].provider_ops += wrs; }
  void op_done(PeerEntry& peer, size_t d, transport::Domain& domain, uint32_t wrs = 1);
  PeerEntry* find(std::span<const uint8_t> key);

  template <typename Fn>
  void for_each(Fn&& fn) {
    for (auto& [key, peer] : peers_) fn(*peer);
  }

 private:
  PeerEntry& entry(std::span<const uint8_t> key);

  size_t domains_;
  WorkerMetrics* metrics_;
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  // Entries are never freed while the worker runs: requests and peer groups point at them.
  std::unordered_map<std::string, std::unique_ptr<PeerEntry>, Hash, std::equal_to<>> peers_;
  // The last entry looked up: a stream of requests to one peer skips hashing its address.
  PeerEntry* last_ = nullptr;
  // Descriptors resolved lately, direct-mapped by identity (a scatter names many peers, so last_
  // alone misses on all but one). A slot keeps its descriptor alive, so the identity cannot be
  // reused by another descriptor while the slot holds it.
  struct DescSlot {
    MrDesc desc;
    PeerEntry* peer = nullptr;
    uint64_t epoch = 0;  // peer->address_epoch when it was resolved
  };
  static constexpr unsigned kDescSlotBits = 8;  // 256 slots (identity_slot)
  std::vector<DescSlot> desc_cache_ = std::vector<DescSlot>(size_t{1} << kDescSlotBits);
};

}  // namespace fabric_lib::detail

// Liveness of the peers one role shares requests with: when each was last heard from (any
// message counts), under which incarnation, and which are overdue. Pure bookkeeping; the caller
// holds its lock and passes the time.
#pragma once

#include <chrono>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "fabric_lib/fabric_lib.h"

namespace fabric_lib::kv {

class PeerTable {
 public:
  using Time = std::chrono::steady_clock::time_point;

  // Starts watching `peer` (a first dispatch to or from it): it has peer_timeout from `now`.
  void watch(const DomainAddress& peer, Time now) {
    auto [it, fresh] = peers_.try_emplace(peer);
    if (fresh || it->second.dead) it->second = {now, it->second.incarnation, false};
  }
  // A message came from `peer`. Returns true when it is a new incarnation of a peer known under
  // another one: the old one restarted (its requests are lost).
  bool heard(const DomainAddress& peer, uint64_t incarnation, Time now) {
    Entry& e = peers_[peer];
    const bool restarted = e.incarnation != 0 && e.incarnation != incarnation;
    e.incarnation = incarnation;
    e.last_heard = now;
    e.dead = false;
    return restarted;
  }
  // Peers silent for longer than `timeout`, among those `is_active` says still matter; they are
  // marked dead (reported once, until heard from again).
  template <typename IsActive>
  std::vector<DomainAddress> overdue(Time now, std::chrono::milliseconds timeout, IsActive is_active) {
    std::vector<DomainAddress> out;
    for (auto it = peers_.begin(); it != peers_.end();) {
      Entry& e = it->second;
      const bool active = is_active(it->first);
      if (!active && now - e.last_heard > 4 * timeout) {  // forget idle peers
        it = peers_.erase(it);
        continue;
      }
      if (active && !e.dead && now - e.last_heard > timeout) {
        e.dead = true;
        out.push_back(it->first);
      }
      ++it;
    }
    return out;
  }
  bool is_dead(const DomainAddress& peer) const {
    auto it = peers_.find(peer);
    return it != peers_.end() && it->second.dead;
  }
  size_t size() const { return peers_.size(); }

 private:
  struct Entry {
    Time last_heard{};
    uint64_t incarnation = 0;
    bool dead = false;
  };
  std::unordered_map<DomainAddress, Entry> peers_;
};

}  // namespace fabric_lib::kv

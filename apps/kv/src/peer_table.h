// Liveness of the peers one role shares requests with: when each was last heard from (any
// message counts), under which incarnation, and which are overdue. Pure bookkeeping; the caller
// holds its lock and passes the time.
#pragma once

#include <algorithm>
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
    if (fresh || it->second.dead) it->second = {now, Time{}, it->second.incarnation, false};
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
  // Evidence of life other than a message (imms arriving from it, writes to it completing):
  // refreshes a known, live peer. Heartbeats queue behind bulk writes on the sender's engine, so
  // a busy peer's messages can be late while its data flows.
  void touch(const DomainAddress& peer, Time now) {
    auto it = peers_.find(peer);
    if (it != peers_.end() && !it->second.dead) it->second.last_heard = now;
  }
  // Peers silent for longer than `timeout`, among those `is_active` says still matter; they are
  // marked dead (reported once, until heard from again).
  // While a peer has nothing in common with us its silence does not count: the clock starts
  // again when it becomes active (idle peers are forgotten after a while).
  template <typename IsActive>
  std::vector<DomainAddress> overdue(Time now, std::chrono::milliseconds timeout, IsActive is_active) {
    std::vector<DomainAddress> out;
    for (auto it = peers_.begin(); it != peers_.end();) {
      Entry& e = it->second;
      if (!is_active(it->first)) {
        if (e.idle_since == Time{}) e.idle_since = now;
        if (now - e.idle_since > 4 * timeout) {
          it = peers_.erase(it);
          continue;
        }
        e.last_heard = std::max(e.last_heard, now);
        ++it;
        continue;
      }
      e.idle_since = Time{};
      if (!e.dead && now - e.last_heard > timeout) {
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
    Time idle_since{};
    uint64_t incarnation = 0;
    bool dead = false;
  };
  std::unordered_map<DomainAddress, Entry> peers_;
};

}  // namespace fabric_lib::kv

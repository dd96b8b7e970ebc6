// One ipc domain's POSIX shared-memory segment (layout in ring_layout.h) and its wake-up FIFO.
//
// The owner creates both (names start with "fabric-lib-nvl-<pid>-<start time>-", mode 0600), keeps
// the FIFO's read end as the domain's wait fd, and unlinks both when it closes. Peers attach by
// the name in the owner's address, check the header against that address (nonce, owner), copy
// the geometry once, and write records into the ring and a byte into the FIFO when the owner
// said it may sleep. Segments of owners that died without closing are unlinked by the next
// domain opened on the host.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "fabric_lib/memory.h"
#include "fabric_lib/status.h"
#include "transport/ipc/mpsc_ring.h"
#include "transport/ipc/ipc_address.h"

namespace fabric_lib::transport::ipc {

inline constexpr const char* kSegmentPrefix = "fabric-lib-nvl-";

// What a writer learns about a registered region from the owner's table.
struct RegionInfo {
  uint64_t key = 0;
  uint64_t base = 0;
  uint64_t length = 0;
  MemoryKind kind = MemoryKind::kHost;
  int device = -1;            // kCuda: the owner's CUDA ordinal
  uint64_t alloc_offset = 0;  // kCuda: byte 0's offset in its allocation
  uint8_t ipc_handle[64] = {};
};

// The table slot of an rkey, and an rkey from a slot and a generation (>= 1).
inline uint64_t key_slot(uint64_t key, uint64_t entries) { return key & (entries - 1); }
inline uint64_t make_key(uint64_t slot, uint64_t generation, uint64_t entries) {
  return generation * entries + slot;
}

class ShmSegment {
 public:
  struct Geometry {
    uint64_t slots = 8192;          // ring capacity (power of two, >= 64)
    uint64_t table_entries = 32768; // registrations at once (power of two)
  };

  // Owner: creates a fresh segment and FIFO for `self`.
  static Result<std::unique_ptr<ShmSegment>> create(const ProcessIdentity& self, Geometry geometry);
  // Peer: maps the segment named in `address` and checks that it is that owner's, still open.
  static Result<std::unique_ptr<ShmSegment>> attach(const IpcAddress& address);
  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  const std::string& name() const { return name_; }
  uint64_t nonce() const { return nonce_; }
  bool owner() const { return owner_; }
  RingView ring() const { return ring_; }
  SegmentHeader* header() const { return header_; }
  uint64_t table_entries() const { return table_entries_; }

  // --- owner -------------------------------------------------------------------------------------
  int wait_fd() const { return fifo_read_; }
  void drain_wakeups();
  // Publishes (or rewrites) entry `slot` as `info` (key last, release); clears it with key 0.
  void publish_region(uint64_t slot, const RegionInfo& info);
  void clear_region(uint64_t slot);
  // Marks the segment closed (peers see it at their next push), so writers fail cleanly.
  void mark_closed();

  // --- peer --------------------------------------------------------------------------------------
  // Wakes the owner if it declared itself asleep (after a push).
  void wake_owner();
  // Reads the table entry for `key` consistently; NotFound when no live region has that key.
  Result<RegionInfo> lookup_region(uint64_t key) const;
  // One load: whether `key` still names a registered region.
  bool key_live(uint64_t key) const {
    return key != 0 && table_[key_slot(key, table_entries_)].key.load(std::memory_order_acquire) == key;
  }
  bool closed() const { return header_->closed.load(std::memory_order_acquire) != 0; }

 private:
  ShmSegment() = default;
  Status map(int fd, uint64_t bytes);

  std::string name_;
  bool owner_ = false;
  uint64_t nonce_ = 0;
  int shm_fd_ = -1;
  void* base_ = nullptr;
  uint64_t bytes_ = 0;
  SegmentHeader* header_ = nullptr;
  RingView ring_;
  RegionEntry* table_ = nullptr;
  uint64_t table_entries_ = 0;
  int fifo_read_ = -1;   // owner
  int fifo_write_ = -1;  // owner: keeps the FIFO open so its read end never reports hang-up; peer: wake-ups
};

// Unlinks segments (and FIFOs) in /dev/shm whose owner process no longer exists. Runs at most
// once per process; returns how many it removed.
size_t remove_stale_segments();

}  // namespace fabric_lib::transport::ipc

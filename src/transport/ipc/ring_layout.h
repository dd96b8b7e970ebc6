// The layout of an ipc domain's shared-memory segment (POSIX shm, one per domain, created by
// its owner and mapped by every peer that writes to it):
//
//   [0, 4 KiB)                  SegmentHeader: identity, geometry, ring positions, flags
//   [ring_offset, +slots*256)   the MPSC ring: fixed 256-byte slots (imms and message fragments)
//   [table_offset, +entries*128) the registration table: one RegionEntry per registered region
//
// Everything after the header's identity fields is written by other processes too, so the owner
// validates every slot it reads and producers copy the geometry once, at attach, and never trust
// it again. All cross-process synchronisation uses lock-free 64-bit atomics (address-free).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace fabric_lib::transport::ipc {

static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared-memory atomics must be lock-free");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "shared-memory atomics must be lock-free");

inline constexpr char kSegmentMagic[8] = {'F', 'L', 'N', 'V', 'S', 'E', 'G', '1'};
inline constexpr uint32_t kSegmentVersion = 1;
inline constexpr size_t kHeaderBytes = 4096;
inline constexpr size_t kSlotBytes = 256;
inline constexpr size_t kSlotHeaderBytes = 40;
inline constexpr size_t kSlotPayloadBytes = kSlotBytes - kSlotHeaderBytes;
inline constexpr size_t kRegionEntryBytes = 128;

struct SegmentHeader {
  char magic[8];
  uint32_t version;
  uint32_t slot_bytes;
  uint64_t slots;           // ring capacity, a power of two
  uint64_t table_entries;   // a power of two
  uint64_t ring_offset;     // bytes from the segment's start
  uint64_t table_offset;
  uint64_t segment_bytes;
  uint32_t owner_pid;
  uint32_t reserved0;
  uint64_t owner_start_time;
  uint64_t nonce;
  alignas(64) std::atomic<uint64_t> enqueue_pos;      // producers' next position
  alignas(64) std::atomic<uint64_t> dequeue_pos;      // the owner's next position (informational)
  alignas(64) std::atomic<uint32_t> consumer_sleeping; // the owner may block: producers wake it
  std::atomic<uint32_t> closed;                        // the owner closed the domain
};
static_assert(sizeof(SegmentHeader) <= kHeaderBytes);

// Slot state word: ring position (low 40 bits of it) | state (2 bits) | claiming pid (22 bits).
// A slot for position p is Free(p) until a producer claims it (Claimed(p, pid)), fills it and
// publishes it (Ready(p)); the owner consumes it and frees it for the next lap (Free(p + slots)).
// A producer that dies between claim and publish leaves Claimed(p, pid) with a dead pid: the
// owner skips such a slot (never one whose claimer lives: it may still write).
enum class SlotState : uint64_t { kFree = 0, kClaimed = 1, kReady = 2 };
inline constexpr uint64_t kPositionBits = 40;
inline constexpr uint64_t kPositionMask = (uint64_t{1} << kPositionBits) - 1;
inline constexpr uint64_t kPidBits = 22;  // Linux pid_max is at most 2^22
inline constexpr uint64_t kPidMask = (uint64_t{1} << kPidBits) - 1;

constexpr uint64_t slot_word(uint64_t position, SlotState state, uint32_t pid) {
  return (position & kPositionMask) << 24 | static_cast<uint64_t>(state) << kPidBits | (pid & kPidMask);
}
constexpr uint64_t word_position(uint64_t w) { return w >> 24; }
constexpr SlotState word_state(uint64_t w) { return static_cast<SlotState>((w >> kPidBits) & 3); }
constexpr uint32_t word_pid(uint64_t w) { return static_cast<uint32_t>(w & kPidMask); }

// Record types carried by slots.
enum class RecordType : uint8_t {
  kImm = 1,       // `count` arrivals of imm `value` (a sender may coalesce equal imms)
  kFragment = 2,  // bytes [offset, offset + payload_len) of message `value` from `sender`, `count` bytes long
};
inline constexpr uint8_t kFlagControl = 1;  // kFragment: a control message (liveness probe)

struct Slot {
  std::atomic<uint64_t> state;
  uint8_t type;
  uint8_t flags;
  uint16_t payload_len;
  uint32_t value;       // imm value, or message sequence number
  uint64_t sender;      // the sending domain's random token
  uint32_t sender_pid;
  uint32_t count;       // kImm: repeat count (>= 1); kFragment: total message length
  uint32_t offset;      // kFragment: offset of this payload in the message
  uint32_t reserved;
  uint8_t payload[kSlotPayloadBytes];
};
static_assert(sizeof(Slot) == kSlotBytes);
static_assert(offsetof(Slot, payload) == kSlotHeaderBytes);

// One registered region, published by the owner for writers to check keys and ranges against
// (the owner's "MR table"). Guarded by `key` as a sequence lock: 0 while free or being rewritten.
// All words are atomics so that concurrent readers in other processes are well defined.
struct RegionEntry {
  std::atomic<uint64_t> key;           // the region's rkey while registered
  std::atomic<uint64_t> base;          // owner's virtual address of byte 0
  std::atomic<uint64_t> length;
  std::atomic<uint64_t> kind_device;   // MemoryKind (low 8 bits) | (CUDA device + 1) << 8
  std::atomic<uint64_t> alloc_offset;  // kCuda: byte 0's offset in its cudaMalloc allocation
  std::atomic<uint64_t> ipc_handle[8]; // kCuda: cudaIpcMemHandle_t of that allocation (64 bytes)
  std::atomic<uint64_t> reserved[3];
};
static_assert(sizeof(RegionEntry) == kRegionEntryBytes);

}  // namespace fabric_lib::transport::ipc

// The address of one ipc domain: which host and process own it, and the name of its shared
// memory segment (ring + registration table). Peers decode it at add_peer and must reject
// anything malformed or foreign with a clear error: it arrives from other processes.
//
// Wire format (little endian), version 1:
//   "FLNV" | u8 version | u8 reserved (0) | u16 name length | boot id (16 bytes) |
//   u64 PID-namespace inode | u32 owner pid | u32 reserved (0) | u64 owner start time |
//   u64 segment nonce | segment name (name length bytes)
// The name is 1..kMaxSegmentNameBytes of [A-Za-z0-9._-], without the leading '/' of shm_open.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "fabric_lib/status.h"
#include "transport/ipc/process_identity.h"

namespace fabric_lib::transport::ipc {

inline constexpr uint8_t kAddressVersion = 1;
inline constexpr size_t kMaxSegmentNameBytes = 96;

struct IpcAddress {
  ProcessIdentity owner;
  uint64_t nonce = 0;        // also stored in the segment's header: names are never trusted alone
  std::string segment_name;  // without the leading '/'

  std::vector<uint8_t> encode() const;
  static Result<IpcAddress> decode(std::span<const uint8_t> bytes);
};

// Whether a segment name is acceptable (length and characters).
bool valid_segment_name(const std::string& name);

// A peer address this process can use: same host (boot id) and same PID namespace. The errors
// say which one differs and what to do instead.
Status check_reachable(const IpcAddress& peer, const ProcessIdentity& self);

}  // namespace fabric_lib::transport::ipc

// Everything MoE peers send each other, with versioned encoders and validating decoders (the
// bytes come from other processes and the network; every field is checked, nothing is trusted):
//
//  - RankInfo: what a rank publishes once at set-up (exchanged by the caller: torch.distributed,
//    a launcher, files): its configuration fingerprint, host, engine address, the descriptors of
//    its three receive regions and, for Path::kDirect, its CUDA IPC handles.
//      "FLMO" | u8 version (1) | u8 path | u16 rank | u16 world | u16 domains | u64 fingerprint |
//      u64 host id | u32 pid | u16 address length, address | 3 x (u32 length, MrDesc bytes) |
//      u32 ipc blob length, blob
//  - Routing-count blocks (layout.h): decode_route_block checks magic, version, source, step,
//    expert count, checksum and bounds before any count is used.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "fabric_lib/domain_address.h"
#include "fabric_lib/memory.h"
#include "fabric_lib/moe/config.h"
#include "fabric_lib/status.h"

namespace fabric_lib::moe {

inline constexpr uint32_t kRankInfoMagic = 0x4F4D4C46;  // "FLMO"
inline constexpr uint8_t kRankInfoVersion = 1;
inline constexpr size_t kMaxIpcBlobBytes = 4096;
inline constexpr size_t kMaxRankInfoBytes = 64 * 1024;

struct RankInfo {
  Path path = Path::kProxy;
  uint32_t rank = 0;
  uint32_t world = 0;
  uint32_t domains = 0;          // the engine's domains per group
  uint64_t fingerprint = 0;      // MoeConfig::fingerprint()
  uint64_t host_id = 0;          // equal for ranks of one host (host_identity())
  uint32_t pid = 0;
  DomainAddress address;         // the engine's main address
  MrDesc route_recv;             // routing-count blocks land here
  MrDesc dispatch_recv;          // tokens land here (private slots, overflow)
  MrDesc combine_recv;           // combine results land here
  std::vector<uint8_t> ipc_blob; // kDirect: the CUDA IPC handles (kernels.h); empty otherwise

  std::vector<uint8_t> encode() const;
  static Result<RankInfo> decode(std::span<const uint8_t> bytes);
};

// A hash of this host's identity (boot id and host name): equal for processes of one host.
uint64_t host_identity();

// Writes a route block (header and counts) into `out` (route_block_bytes(counts.size()) bytes).
void encode_route_block(uint32_t source, uint64_t step, std::span<const uint32_t> counts, std::span<uint8_t> out);

// Validates the block a peer wrote and returns a view of its counts (inside `block`).
// `max_total`: the most pairs a source can send (M * K); each count is bounded by it too.
Result<std::span<const uint32_t>> decode_route_block(std::span<const uint8_t> block, uint32_t expected_source,
                                                     uint64_t expected_step, uint32_t experts, uint32_t max_total);

}  // namespace fabric_lib::moe

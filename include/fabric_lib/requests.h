// Descriptions of the operations a TransferEngine accepts, the sharding rules that split them
// over the domains of a group, and imm_count_of(): how many imms each one delivers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <variant>
#include <vector>

#include "fabric_lib/memory.h"
#include "fabric_lib/status.h"

namespace fabric_lib {

// Names an accepted request (returned by every submit); never 0. Unique among the requests in
// flight; a finished request's id is not reused until its slot has been taken 2^32 - 1 times more
// (an id is a slot of the engine's request slab, its generation, and the group).
using TransferId = uint64_t;

// Receives one message posted with submit_send. The bytes are valid only during the call.
using RecvCallback = std::function<void(std::span<const uint8_t> message)>;
// Reports a failed receive (e.g. a message longer than the posted buffer) or, once, Cancelled
// at stop().
using RecvErrorCallback = std::function<void(const Status& status)>;

// Sharding constants. They are part of the contract: imm_count_of() follows from them.
// A single write of L bytes is split into min(domains allowed by its route, max(1, L / kMinShardBytes))
// shards of equal size, rounded up to a multiple of kShardAlignBytes; the last shard takes the
// remainder. So writes shorter than 2 * kMinShardBytes stay on one domain.
inline constexpr uint64_t kMinShardBytes = 64 * 1024;
inline constexpr uint64_t kShardAlignBytes = 4096;
// No work request (WR) moves more than this; a longer shard becomes several WRs, each with the imm.
inline constexpr uint64_t kMaxWrBytes = 1ull << 30;

// Spread the work over up to `max_shards` consecutive domains of the group (0 = all of them),
// starting at a rotating domain so that consecutive small requests use different NICs. (On the
// same-host IPC backend, whose domains share one medium, 0 means one domain a request: a paged
// write's pages, a single write's shards and each by-bytes scatter destination's shards are all
// posted by one domain, since splitting would add work and no bandwidth; a single write of up to
// kMaxWrBytes goes as one operation whose imm the target counts once per shard. The imm counts
// are the same either way: imm_count_of() does not depend on where or how shards are posted.)
struct RoundRobin {
  uint32_t max_shards = 0;
};
// Put the whole request on one domain (local domain i always writes to the peer's domain i).
struct Pinned {
  uint32_t domain = 0;
};
using Route = std::variant<RoundRobin, Pinned>;

// One contiguous write from a local region into a remote one.
struct WriteRequest {
  MrHandle src;
  uint64_t src_offset = 0;
  MrDesc dst;
  uint64_t dst_offset = 0;
  uint64_t length = 0;            // 0 is allowed only together with an imm
  std::optional<uint32_t> imm;    // carried by every WR of the write
  Route route = RoundRobin{};
};

// Many equally sized pages: page i goes from
//   src + src_offset + src_pages[i] * src_stride   to   dst + dst_offset + dst_pages[i] * dst_stride.
// Pages are split into contiguous runs of the index list, one run per domain. Each page is one WR
// and carries the imm, so the target counts one imm per page.
struct PagedWriteRequest {
  MrHandle src;
  MrDesc dst;
  uint64_t page_length = 0;       // 1 .. kMaxWrBytes
  std::vector<uint32_t> src_pages;
  std::vector<uint32_t> dst_pages;  // same size as src_pages
  uint64_t src_stride = 0;        // >= page_length unless there is a single page
  uint64_t dst_stride = 0;
  uint64_t src_offset = 0;
  uint64_t dst_offset = 0;
  std::optional<uint32_t> imm;
  Route route = RoundRobin{};
};

// How a scatter uses the domains.
enum class ScatterSharding : uint8_t {
  kByPeer = 0,   // each target is written whole through one domain; targets rotate over domains
  kByBytes = 1,  // each target's bytes are sharded like a single write
};

// One destination of a scatter. With a PeerGroup, `peer` indexes the group's descriptors and `dst`
// stays empty; without one, `dst` names the destination region.
struct ScatterTarget {
  uint64_t length = 0;
  uint64_t src_offset = 0;
  uint64_t dst_offset = 0;
  MrDesc dst;
  uint32_t peer = 0;
};

class PeerGroup;

// One local region written to many destinations (e.g. MoE dispatch), completing as one request.
// Each target's WRs are posted in order; WRs of different targets in any order — targets that
// take turns among a few descriptors (or group members) have their WRs grouped by target, so those
// to one destination go to the provider together.
struct ScatterRequest {
  MrHandle src;
  std::vector<ScatterTarget> targets;
  std::optional<uint32_t> imm;
  ScatterSharding sharding = ScatterSharding::kByPeer;
  // kByPeer: target t goes whole through domain_of(t); kByBytes: each target is sharded like a
  // single write on this route.
  Route route = RoundRobin{};
  const PeerGroup* group = nullptr;  // optional pre-resolved destinations (TransferEngine::add_peer_group)
};

// --- imm counting -------------------------------------------------------------------------------
// Each returns how many imms the destination receives from one request when both sides have
// `domains` domains per group (0 when the request carries no imm). Pure functions of the request:
// the receiver computes its expectation from them.

// A single write of `length` bytes on `route`.
uint64_t imm_count_of_write(uint64_t length, const Route& route, size_t domains);
uint64_t imm_count_of(const WriteRequest& request, size_t domains);
uint64_t imm_count_of(const PagedWriteRequest& request, size_t domains);
// What scatter target `target_index` receives.
uint64_t imm_count_of(const ScatterRequest& request, size_t target_index, size_t domains);
// An imm-only request delivers exactly one imm; a barrier delivers one to each of its peers.
inline constexpr uint64_t kImmCountOfImmOnly = 1;
inline constexpr uint64_t kImmCountOfBarrierPerPeer = 1;

}  // namespace fabric_lib

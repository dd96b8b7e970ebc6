// Prepared requests: a paged write or a scatter validated and planned once, then submitted many
// times with only what changes — the page lists, the slice lengths and offsets, the imm. The
// weight-transfer schedule (thousands of writes every step) and the MoE per-step scatter use them.
//
// A prepared request holds its source region and destinations: TransferEngine::prepare_* checks
// everything that does not change (regions, descriptors, access, strides, route, the largest page
// index or window each submit may use) and resolves the peers; submit_prepared checks only the
// bounds of what it is given. Each submit is a request of its own: validated synchronously, then
// completes exactly once, with the same sharding and imm counting as the plain form (the imm
// counts below are those of PagedWriteRequest / ScatterRequest). A prepared handle is valid for
// the engine that made it (another engine's handle is refused) until its source region is
// unregistered (then submits fail with NotFound); copying it is cheap.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "fabric_lib/memory.h"
#include "fabric_lib/requests.h"

namespace fabric_lib {

class TransferEngine;
class PeerGroup;

// The fixed part of a paged write: page i of a submit goes from
//   src + src_offset + src_pages[i] * src_stride   to   dst + dst_offset + dst_pages[i] * dst_stride,
// with every source index < src_page_bound and every destination index < dst_page_bound.
struct PagedWriteTemplate {
  MrHandle src;
  MrDesc dst;
  uint64_t page_length = 0;      // 1 .. kMaxWrBytes
  uint64_t src_stride = 0;       // >= page_length
  uint64_t dst_stride = 0;       // >= page_length
  uint64_t src_offset = 0;
  uint64_t dst_offset = 0;
  uint32_t src_page_bound = 0;   // source indices are < this (>= 1); the region must hold them all
  uint32_t dst_page_bound = 0;   // destination indices are < this (>= 1)
  Route route = RoundRobin{};
};

class PreparedPagedWrites {
 public:
  PreparedPagedWrites() = default;
  bool empty() const { return data_ == nullptr; }
  struct Data;  // defined by the engine

 private:
  friend class TransferEngine;
  explicit PreparedPagedWrites(std::shared_ptr<const Data> data) : data_(std::move(data)) {}
  std::shared_ptr<const Data> data_;
};

// One destination of a prepared scatter: peer `peer` of the PeerGroup, a source window
// [src_offset, src_offset + src_window) and a destination window [dst_offset, dst_offset + dst_window).
struct PreparedScatterTarget {
  uint32_t peer = 0;
  uint64_t src_offset = 0;
  uint64_t src_window = 0;
  uint64_t dst_offset = 0;
  uint64_t dst_window = 0;
};

// The fixed part of a scatter: one source region, destinations from a PeerGroup.
struct ScatterTemplate {
  MrHandle src;
  const PeerGroup* group = nullptr;  // required (TransferEngine::add_peer_group)
  std::vector<PreparedScatterTarget> targets;
  ScatterSharding sharding = ScatterSharding::kByPeer;
  Route route = RoundRobin{};
};

// What one submit writes to one prepared target: `length` bytes from src_offset + offset_in_src
// to dst_offset + offset_in_dst, within the target's windows. A zero length writes nothing but
// still delivers the submit's imm (kByPeer: one imm per target), as in ScatterRequest.
struct ScatterSlice {
  uint64_t length = 0;
  uint64_t offset_in_src = 0;
  uint64_t offset_in_dst = 0;
};

class PreparedScatter {
 public:
  PreparedScatter() = default;
  bool empty() const { return data_ == nullptr; }
  size_t targets() const;
  struct Data;  // defined by the engine

 private:
  friend class TransferEngine;
  explicit PreparedScatter(std::shared_ptr<const Data> data) : data_(std::move(data)) {}
  std::shared_ptr<const Data> data_;
};

// How many imms one submit_prepared of a PreparedPagedWrites with an imm delivers: one per page
// (as PagedWriteRequest).
inline constexpr uint64_t imm_count_of_paged_writes(size_t pages) { return pages; }

// How many imms prepared target `t` receives from one submit of `length` bytes (0 without an imm):
// the ScatterRequest rule for that target.
uint64_t imm_count_of_scatter_target(uint64_t length, ScatterSharding sharding, const Route& route, size_t domains);

}  // namespace fabric_lib

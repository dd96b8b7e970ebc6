// The ipc Domain (DESIGN.md sections 3 and 6): same-host, cross-process transfers with the
// transport contract — reliable, UNORDERED, a WRITE's data visible before its imm.
//
//   - Each domain owns a shared-memory segment (shm_segment.h): an MPSC ring that peers push imms
//     and message fragments into, and a registration table peers check keys and ranges against.
//     Its address (ipc_address.h) names the host (boot id), the owner process and the segment.
//   - A WRITE looks its rkey up in the target's table, copies the bytes with a CopyEngine —
//     process_vm_writev for host targets, CUDA (IPC-mapped memory, several streams or a page
//     kernel) for GPU targets — and, once the copy is complete, pushes its imm into the target's
//     ring. Its local completion follows the push, so a completed write's bytes are at the target
//     (delivery-complete). Copies finish in any order, so do writes.
//   - A run (post_writes: a paged write's pages on this domain, WRs with one peer, source
//     region, key, length, context and imm) is ONE op, ONE gather copy (CopyRequest::segments;
//     a page list given to post_pages: CopyRequest::pages, its indices as they are), ONE imm
//     record counting its WRs and ONE completion event (Event::count = its WRs): the work per
//     page is the range check and one segment or page pair, not an op, a copy, an imm and an event.
//     The target turns each imm record into one kImm event with the record's count.
//   - SEND pushes the message in fragments into the target's ring; the target reassembles them
//     into posted receive buffers (message_assembler.h). Control messages (the liveness probe)
//     travel the same way, flagged.
//   - A full ring is back-pressure: imms and fragments wait in the peer's outbox, never dropped.
//   - A peer whose process exited (or closed its domain) is detected by its pid and start time
//     (and by the copy failing); its pending operations end with PeerUnreachable.
//
// Threading: the worker thread only, like every Domain. wait_fd() is the segment's wake-up FIFO.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/slab_pool.h"
#include "transport/domain.h"
#include "transport/ipc/gpu_backend.h"
#include "transport/ipc/host_copy_engine.h"
#include "transport/ipc/message_assembler.h"
#include "transport/ipc/mpsc_ring.h"
#include "transport/ipc/ipc_address.h"
#include "transport/ipc/shm_segment.h"

namespace fabric_lib::transport::ipc {

struct IpcOptions {
  ShmSegment::Geometry geometry;
  size_t max_inflight = 4096;  // ops in flight (a run of WRs is one op); posts say kAgain beyond
  // WRs the engine may hold outstanding here (DomainInfo::max_inflight; at least max_inflight):
  // a paged write's run of pages is one op, so far more WRs than ops fit. 65536: fourteen
  // 4096-page requests (a KV layer's shape) in flight on one peer (7/8 of it), where 16384 let
  // only three and a half — fabric-bench's 4096 x 4 KiB point read 0.66x of a contiguous copy at
  // window 16 with it, 0.87x with this (one H100; docs/gpu.md).
  size_t max_inflight_wrs = 65536;
  HostCopyEngine::Options host_copies;
  GpuBackendFactory gpu;  // empty: GPU memory is Unsupported (builds without CUDA)
};

class IpcDomain final : public Domain {
 public:
  static Result<std::unique_ptr<IpcDomain>> open(IpcOptions options);
  ~IpcDomain() override;

  const DomainInfo& info() const override { return info_; }
  const std::vector<uint8_t>& address() const override { return address_; }

  Result<DomainMr> register_memory(void* ptr, size_t length, Access access, MemoryKind kind) override;
  void unregister_memory(uint64_t mr_id) override;
  // Rejects malformed addresses and those of other hosts or PID namespaces. A peer that exited or
  // closed its domain gets a handle whose operations all end with PeerUnreachable events.
  Result<PeerHandle> add_peer(std::span<const uint8_t> address) override;
  void remove_peer(PeerHandle peer) override;

  PostResult post_write(const WriteWr& wr, Status* error) override;
  // Consecutive WRs with one peer, source region, key, length (> 0), context and imm (a paged
  // write's pages on this domain) are posted as one op and one gather copy; consecutive WRs that
  // continue each other on both sides (a write's shards, the engine keeps them on one domain of
  // a one-medium group) as one op and one plain copy. A run's WRs complete together (one event
  // counting them) and their imms arrive as one record. Every WR is checked
  // as post_write checks it: when WR j of a run is refused, the run's first j are posted (as one
  // op) and WR j is reported with post_write's error. A run the copy engine cannot take now
  // (kAgain), or one met at the op limit, posts nothing. Anything else (imm-only WRs, a dead or
  // unknown peer, a run of one) goes through post_write.
  size_t post_writes(std::span<const WriteWr> wrs, PostResult* last, Status* error) override;
  // A paged write's run straight from its page list: its pages range-checked (by their largest
  // indices) and made the page pairs of one gather copy — no WriteWr per page (ipc_domain_runs.cc).
  size_t post_pages(const PageRunWr& run, PostResult* last, Status* error) override;
  PostResult post_send(const SendWr& wr, Status* error) override;
  PostResult post_recv(const RecvWr& wr, Status* error) override;
  bool supports_control() const override { return true; }
  PostResult post_control_send(const SendWr& wr, Status* error) override;
  PostResult post_control_recv(const RecvWr& wr, Status* error) override;
  size_t poll(std::vector<Event>& out, size_t max) override;

  int wait_fd() const override { return segment_->wait_fd(); }
  bool ready_to_block() override;
  bool has_deferred_work() const override;

  // Diagnostics (and tests).
  size_t peers() const { return peers_.size(); }
  size_t ops_in_flight() const { return ops_.in_use(); }
  size_t imports_open() const;
  const std::string& segment_name() const { return segment_->name(); }

 private:
  struct LocalRegion {
    uint64_t id = 0;
    uint8_t* base = nullptr;
    uint64_t length = 0;
    MemoryKind kind = MemoryKind::kHost;
    int device = -1;
    uint64_t table_slot = UINT64_MAX;  // UINT64_MAX: not published (local-only)
    uint64_t key = 0;
  };
  struct Peer;
  struct Op {
    EventKind kind = EventKind::kWriteDone;
    uint64_t context = 0;
    Peer* peer = nullptr;  // lives while it has ops (maybe_release waits for ops == 0)
    bool has_imm = false;
    uint32_t imm = 0;
    uint32_t wrs = 1;  // WRs it stands for: a run's, else 1 (its event's count)
    uint32_t imms = 1; // arrivals its imm counts at the target: its WRs' WriteWr::imm_count summed
    Status error;  // a failure noted while the copy still runs
  };
  struct OutItem {
    uint32_t op = 0;
    bool imm = false;          // an imm; else a message
    uint32_t count = 1;        // an imm: arrivals not yet pushed (a run's WRs)
    bool control = false;
    const uint8_t* bytes = nullptr;
    uint64_t length = 0;
    uint64_t sent = 0;
    uint32_t seq = 0;
    uint32_t imm_value = 0;
    bool started = false;      // a message's first fragment went out
  };
  using ImportKey = std::pair<std::string, int>;  // IPC handle bytes, local device
  struct Import {
    void* base = nullptr;
    int device = -1;
    uint32_t refs = 0;  // remote regions using it
  };
  struct RemoteRegion {
    RegionInfo info;
    uint8_t* mapped = nullptr;  // GPU targets: byte 0 as mapped here
    int device = -1;            // the device whose context maps it
    ImportKey import;           // empty handle: no import (host memory, or our own process)
  };
  struct Peer {
    PeerHandle handle = 0;
    IpcAddress address;
    std::unique_ptr<ShmSegment> segment;  // null when the peer was gone at add_peer
    RingProducer producer;
    std::deque<OutItem> outbox;
    std::unordered_map<uint64_t, RemoteRegion> regions;  // by rkey
    std::map<ImportKey, Import> imports;
    uint32_t ops = 0;       // ops not yet completed
    uint32_t next_seq = 1;
    bool dead = false;
    bool removed = false;
    bool listed = false;    // in outbox_peers_
    Status why;
    int watch_fd = -1;         // pidfd of the owner process (-1: none; /proc is read instead)
    uint64_t checked_pass = 0; // the poll pass of the last look at watch_fd
    bool exited_seen = false;
    int64_t last_check_ns = 0;
    ~Peer();
  };

  IpcDomain() = default;
  Status open_resources(IpcOptions options);
  Result<GpuBackend*> gpu();

  // ipc_domain_ops.cc: operations, the outboxes, copies, peer failure.
  uint32_t new_op(EventKind kind, uint64_t context, Peer& peer);
  // post_write's copy, the peer and both regions found: checks the ranges, makes the op and
  // submits the copy.
  PostResult post_copy(Peer& peer, const WriteWr& wr, const LocalRegion& src, const RemoteRegion& dst, Status* error);
  // Why `wr` may not be posted: its source outside `src`, or its target outside `target`.
  static Status check_ranges(const WriteWr& wr, const LocalRegion& src, const RegionInfo& target);
  // One op and one copy for `wrs` (checked; one run, or one WR): a plain copy for one WR or WRs
  // that continue each other, a gather copy otherwise. Nothing is left of the op unless kPosted.
  PostResult start_copy(Peer& peer, std::span<const WriteWr> wrs, const LocalRegion& src, const RemoteRegion& dst,
                        Status* error);
  // What an op's WRs share: how many, their context and imm, each one's length.
  struct CopyShape {
    uint32_t wrs = 1;
    uint64_t context = 0;
    bool has_imm = false;
    uint32_t imm = 0;
    uint64_t length = 0;
    uint32_t imms = 1;  // the imm's arrivals at the target (Op::imms)
  };
  // What a copy gathers (gpu::CopyRequest's fields of the same names): nothing (a plain copy),
  // offset pairs, or page pairs and their strides.
  struct Gather {
    std::span<const gpu::CopySegment> segments;
    std::span<const gpu::CopyPagePair> pages;
    uint64_t src_stride = 0;
    uint64_t dst_stride = 0;
  };
  // The op and its copy: from `from` to the target's byte `dst_offset` (a plain copy: `gather`
  // empty), or a gather: of segments (offsets from both regions' bases; `from` = src.base, which
  // gather_space() gave), or of page pairs (offsets from `from` and `dst_offset`, which
  // page_space() gave).
  PostResult submit_copy(Peer& peer, const CopyShape& shape, const uint8_t* from, uint64_t dst_offset,
                         const Gather& gather, const LocalRegion& src, const RemoteRegion& dst, Status* error);
  // Where a gather of `n` segments into `dst` is written: the GPU copy engine's room when it
  // offers one (pinned memory its kernel reads: the segments are then written once), else
  // segments_. Valid until the next call on the copy engine.
  std::span<gpu::CopySegment> gather_space(size_t n, const RemoteRegion& dst);
  // The same for `n` page pairs (the engine's page_room, else pages_).
  std::span<gpu::CopyPagePair> page_space(size_t n, const RemoteRegion& dst);

  // ipc_domain_runs.cc: post_writes' runs.
  // Where a run goes: its peer, source and target regions. `one_by_one`: an unknown, removed or
  // dead peer, or no source region — post the run WR by WR for post_write's answers. Otherwise a
  // null `dst` means nothing may be posted now (`*last`: kAgain at the op limit, or kFailed with
  // the target key's error).
  struct RunTarget {
    Peer* peer = nullptr;
    const LocalRegion* src = nullptr;
    RemoteRegion* dst = nullptr;
    bool one_by_one = false;
  };
  RunTarget run_target(PeerHandle peer, const void* src_desc, uint64_t rkey, PostResult* last, Status* error);
  // Whether `b` starts where `a` ends, on both sides (the next shard of one write).
  static bool continues(const WriteWr& a, const WriteWr& b);
  // How many WRs from the front of `wrs` make one run (1: none): WRs that continue each other
  // (any lengths), else WRs of one length.
  static size_t run_length(std::span<const WriteWr> wrs);
  // Posts one run (>= 2 WRs) as one op; returns how many of its WRs were posted.
  size_t post_run(std::span<const WriteWr> run, PostResult* last, Status* error);
  // Posts WRs one by one through post_write; returns how many were posted.
  size_t post_each(std::span<const WriteWr> wrs, PostResult* last, Status* error);
  // post_pages' slow path: its pages as WriteWrs through post_writes (unusual peers, imm-only).
  size_t post_pages_as_writes(const PageRunWr& run, PostResult* last, Status* error);

  // Reports op `i` (one event, counting its WRs) and frees it.
  void complete(uint32_t op, Status status);
  // Frees op `i` without an event (a copy the engine did not accept).
  void drop_op(uint32_t i);
  Peer* find_peer(PeerHandle handle);
  Status check_peer(Peer* peer, PeerHandle handle);
  PostResult fail_async(EventKind kind, uint64_t context, Peer& peer);
  Result<RemoteRegion*> resolve_region(Peer& peer, uint64_t rkey, const LocalRegion& src);
  void drop_region(Peer& peer, uint64_t rkey);
  PostResult enqueue_message(const SendWr& wr, bool control, EventKind kind, Status* error);
  bool pump_outbox(Peer& peer);
  // Queues `item` in `peer`'s outbox and lists the peer for pump_outboxes.
  void queue_out(Peer& peer, const OutItem& item);
  // Pushes the imm items at the front of `peer`'s outbox (equal values, up to
  // kMaxImmRecordCount arrivals) as one record. False when the ring is full or closed.
  bool push_imm_record(Peer& peer);
  bool pump_outboxes();
  bool progress_copies();
  void peer_failed(Peer& peer, const Status& why);
  // Whether the peer's owner process has exited (a pidfd poll, at most once per poll pass; without
  // pidfds a /proc read at most every 10 ms). Fails the peer when it has.
  bool owner_exited(Peer& peer);
  void maybe_release(Peer& peer);
  void release_removed_peers();
  bool sweep_peers(int64_t now);

  // ipc_domain_poll.cc: the owner's side of the ring.
  size_t consume_ring(std::vector<Event>& out, size_t max);
  void on_blocked_slot(uint32_t claimer);

  IpcOptions options_;
  DomainInfo info_;
  std::vector<uint8_t> address_;
  ProcessIdentity self_;
  uint64_t sender_token_ = 0;
  std::unique_ptr<ShmSegment> segment_;
  RingConsumer consumer_;
  MessageAssembler assembler_;
  HostCopyEngine host_copies_;
  std::unique_ptr<GpuBackend> gpu_;
  Status gpu_error_;  // why the GPU backend could not be made (once tried)

  std::unordered_map<uint64_t, std::unique_ptr<LocalRegion>> regions_;
  uint64_t next_region_id_ = 1;
  uint64_t key_generation_ = 0;
  std::vector<uint64_t> free_table_slots_;
  uint64_t next_table_slot_ = 0;

  std::unordered_map<PeerHandle, std::unique_ptr<Peer>> peers_;
  size_t removed_peers_ = 0;  // peers removed but kept for their ops in flight (maybe_release)
  // The peers whose outbox may hold items (Peer::listed), in the order they were queued to:
  // what pump_outboxes walks. A peer leaves it when pumped empty, or when it is released.
  std::vector<Peer*> outbox_peers_;
  PeerHandle next_peer_ = 1;
  SlabPool<Op> ops_;  // an op's index travels in copy requests
  std::deque<Event> completed_;
  std::vector<gpu::CopyDone> copy_done_;
  std::vector<gpu::CopySegment> segments_;  // a run's gather when the copy engine offers no room, reused
  std::vector<gpu::CopyPagePair> pages_;     // a paged run's pairs, the same
  size_t outbox_items_ = 0;

  // Owner side.
  uint64_t blocked_position_ = UINT64_MAX;
  int64_t blocked_since_ns_ = 0;
  bool asked_to_sleep_ = false;
  uint64_t pass_ = 1;  // poll() calls so far
  int64_t next_sweep_ns_ = 0;
  uint64_t invalid_records_ = 0;
  int64_t next_partial_check_ns_ = 0;
};

}  // namespace fabric_lib::transport::ipc

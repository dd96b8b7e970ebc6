// The transport contract (DESIGN.md section 3): one Domain is one NIC, or one emulated NIC.
//
// A Domain promises reliable, UNORDERED delivery: nothing above it may assume that two work
// requests (WRs), even to the same peer, complete or land in posting order. A WRITE's data is
// visible at the target before its imm is reported there.
//
// Threading: a Domain is used by exactly one thread (its group's worker), which opens it,
// posts, polls and closes it. No method blocks.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <vector>

#include "fabric_lib/memory.h"
#include "fabric_lib/status.h"

namespace fabric_lib::transport {

struct DomainInfo {
  TransportKind transport = TransportKind::kLibfabric;
  std::string provider;   // e.g. "tcp;ofi_rxm"
  std::string fabric;     // e.g. "127.0.0.1/32"
  std::string name;       // e.g. "lo", "rdmap0s31-rdm", "shm"
  size_t max_inflight = 0;        // WRs that may be outstanding at once (post returns kAgain beyond)
  uint64_t max_msg_bytes = 0;     // largest single WRITE/SEND
  bool delivery_complete = false; // a WRITE's local completion means the target has the data
  // How many WRs the worker posts to this domain, and how many events it takes from one poll(),
  // per progress pass. A NIC's post is cheap and its completions should be reaped often; a domain
  // whose every poll() carries a fixed cost (the ipc backend issues one batch of GPU copies per
  // poll: kernel launches, an event record, event queries) asks for more, so that cost spreads
  // over more WRs.
  size_t wrs_per_pass = 64;
  // The group's domains of this backend share one medium (the ipc backend: one host's memory and
  // GPU copy engines), so splitting one request over them adds per-domain work and no bandwidth:
  // the engine keeps a paged write's pages, and a write's shards, on one domain unless the route
  // asks for a shard count (requests still rotate over the domains; the WRs and imm counts are
  // the route's either way, only the posting domain changes).
  bool one_medium = false;
  // The domain honours WriteWr::imm_count > 1: one WR's imm counted that many times at the target
  // (the ipc backend: an op's imm travels as one record with a count anyway). On a one-medium
  // group the engine then posts a default-routed write as ONE WR announcing its shards' imm
  // count, instead of the shards as WRs that would all go to one domain.
  bool takes_imm_count = false;
  // The domain's posts are issued by its next poll(), together with whatever else the group's
  // domains posted before it (the ipc backend: one batch of GPU copies, one page-copy launch, per
  // poll). The worker then takes new requests only before a pass's polls, not between two
  // domains' polls as it does for providers whose poll is slow (tcp: ~1.7 us per fi_cq_read):
  // requests taken between polls would go out as a launch of their own.
  bool posts_issued_by_poll = false;
  // The provider reports FI_HMEM: it may register GPU memory (kCuda). Whether it really can is
  // known at the first such registration (Debian's shm reports FI_HMEM without CUDA support).
  bool hmem = false;
  // A call into this provider may never return once a peer dies (libfabric 1.17's shm spins on a
  // lock the killed peer held in its shared memory: docs/failure-semantics.md). The engine then
  // makes every provider call of the group on its worker thread, which the watchdog can give up
  // on, and none on an application's thread (no posting on the submitter's thread, progress()
  // does nothing): a stranded submitter would be a hang in the application.
  bool calls_may_hang_on_dead_peer = false;
};

// Counters a domain stack keeps about its own behaviour, for EngineStats (summed over a group's
// domains). Atomics: the worker thread bumps them, stats() reads them from any thread.
struct DomainCounters {
  // The reordering wrapper (transport/reorder/): windows of >= 2 WRs posted in shuffled order,
  // and events (completions, imms) held back for later polls.
  std::atomic<uint64_t> unordered_windows_shuffled{0};
  std::atomic<uint64_t> unordered_events_held{0};
};

// Opaque handle of a peer inserted into the domain's address vector.
using PeerHandle = uint64_t;

// A registration on one domain.
struct DomainMr {
  uint64_t id = 0;         // domain-local id, for unregister_memory
  void* desc = nullptr;    // local descriptor to pass with WRs from this region
  uint64_t rkey = 0;       // remote key for peers
  uint64_t addr_base = 0;  // remote address of byte 0 (VA or 0, per the provider's mr_mode)
  std::vector<uint8_t> transport_blob;
};

struct WriteWr {
  const void* src = nullptr;  // null with length 0: imm-only (the domain supplies a valid source)
  uint64_t length = 0;
  void* src_desc = nullptr;
  PeerHandle peer = 0;
  uint64_t remote_addr = 0;
  uint64_t rkey = 0;
  bool has_imm = false;
  // How many arrivals of `imm` the target counts for this WR: 1, or on a domain that says
  // DomainInfo::takes_imm_count, the shards of a write this one WR stands for (the target's
  // imm_count_of_write() stays the route's shard count; the sender posts one WR).
  uint16_t imm_count = 1;
  uint32_t imm = 0;
  uint64_t context = 0;
};
static_assert(sizeof(WriteWr) == 64, "a WR fills one cache line; imm_count sits in has_imm's padding");

// A run of page WRITEs of one paged write on one domain, as the page list itself: WR i copies
// `page_length` bytes from src + src_pages[i] * src_stride to remote_addr + dst_pages[i] *
// dst_stride (remote_addr: the target region's address for the provider — addr_base plus the
// request's destination offset). Every WR carries `context` and, with has_imm, `imm`, exactly as
// the `count` WriteWrs it stands for would. The page arrays are only valid during the call.
struct PageRunWr {
  const uint8_t* src = nullptr;  // source byte of page index 0
  void* src_desc = nullptr;
  PeerHandle peer = 0;
  uint64_t remote_addr = 0;
  uint64_t rkey = 0;
  uint64_t page_length = 0;
  uint64_t src_stride = 0;
  uint64_t dst_stride = 0;
  const uint32_t* src_pages = nullptr;
  const uint32_t* dst_pages = nullptr;
  size_t count = 0;
  bool has_imm = false;
  uint32_t imm = 0;
  uint64_t context = 0;
  // Optional: no index of src_pages[0, count) is larger than largest_src_page, none of dst_pages
  // larger than largest_dst_page (the engine found its whole list's largest indices when it
  // checked the request; a run is part of that list). A backend that checks each page's range may
  // check these once instead of finding each run's own; false: it finds them itself.
  bool largest_known = false;
  uint32_t largest_src_page = 0;
  uint32_t largest_dst_page = 0;

  // WR i as a WriteWr.
  WriteWr write(size_t i) const {
    WriteWr wr;
    wr.src = src + uint64_t{src_pages[i]} * src_stride;
    wr.length = page_length;
    wr.src_desc = src_desc;
    wr.peer = peer;
    wr.remote_addr = remote_addr + uint64_t{dst_pages[i]} * dst_stride;
    wr.rkey = rkey;
    wr.has_imm = has_imm;
    wr.imm = imm;
    wr.context = context;
    return wr;
  }
};

struct SendWr {
  const void* buf = nullptr;
  uint64_t length = 0;
  void* desc = nullptr;
  PeerHandle peer = 0;
  uint64_t context = 0;
};

struct RecvWr {
  void* buf = nullptr;
  uint64_t length = 0;
  void* desc = nullptr;
  uint64_t context = 0;
};

enum class PostResult : uint8_t {
  kPosted,  // the WR will produce exactly one completion event
  kAgain,   // transient back-pressure: poll, then post it again
  kFailed,  // rejected; no event will come (error filled in)
};

enum class EventKind : uint8_t {
  kWriteDone,     // local completion of a WRITE (context = WriteWr::context)
  kSendDone,      // local completion of a SEND
  kRecvDone,      // a message landed in a posted receive (context = RecvWr::context, length set)
  kImm,           // remote WRITEs with imm landed here: `count` arrivals of `imm` (context unused)
  kRemoteError,   // an error without a local operation (logged by the worker)
  kControlSendDone,  // local completion of a control message (liveness probe)
  kControlRecvDone,  // a control message landed in a posted control buffer
};

struct Event {
  EventKind kind = EventKind::kWriteDone;
  uint32_t imm = 0;
  uint64_t context = 0;
  uint64_t length = 0;
  // kWriteDone: how many WRs posted with `context` this event reports (a backend may report a
  // run of WRs that share a context in one event, all with this status; libfabric never does).
  // kImm: how many arrivals of `imm` it reports (the ipc backend reports a run's imms at once).
  uint32_t count = 1;
  Status status;  // ok, or why the operation failed
};

class Domain {
 public:
  virtual ~Domain() = default;

  virtual const DomainInfo& info() const = 0;
  // This domain's address, as peers must see it.
  virtual const std::vector<uint8_t>& address() const = 0;

  virtual Result<DomainMr> register_memory(void* ptr, size_t length, Access access, MemoryKind kind) = 0;
  virtual void unregister_memory(uint64_t mr_id) = 0;

  virtual Result<PeerHandle> add_peer(std::span<const uint8_t> address) = 0;
  virtual void remove_peer(PeerHandle peer) = 0;

  virtual PostResult post_write(const WriteWr& wr, Status* error) = 0;
  // A run of WRITEs in one call: posts `wrs` in order until one is not posted and returns how
  // many were (each posted one completes exactly once, as with post_write). `*last` is the result
  // of the first WR not posted (kAgain, or kFailed with `*error` filled in), kPosted when all
  // were. What a backend may win by it: one region lookup and one copy batch for a paged write's
  // pages (ipc), one watchdog bracket (guard), FI_MORE (libfabric, later). This default posts
  // them one by one.
  virtual size_t post_writes(std::span<const WriteWr> wrs, PostResult* last, Status* error) {
    size_t n = 0;
    *last = PostResult::kPosted;
    for (const WriteWr& wr : wrs) {
      *last = post_write(wr, error);
      if (*last != PostResult::kPosted) break;
      ++n;
    }
    return n;
  }
  // A paged write's run on this domain, given as its page list (PageRunWr): the same contract as
  // post_writes over the WRs it stands for — posted in order up to the first one not posted,
  // the return value counts them, `*last` / `*error` describe the first one not posted. What a
  // backend may win by it: no WriteWr per page at all (the ipc backend turns the list straight
  // into one gather copy). This default hands the WRs to post_writes in batches, so decorators
  // that override post_write or post_writes see every WR. The batches start small and double:
  // a provider that is full takes one or two WRs per call (shm, in a paged 4 KiB stream), and
  // building 64 WriteWrs to post one cost a tenth of the worker's time there.
  virtual size_t post_pages(const PageRunWr& run, PostResult* last, Status* error) {
    constexpr size_t kFirstBatch = 4, kMaxBatch = 64;
    union Batch {  // uninitialized: each WR is built right before it is used
      Batch() {}
      WriteWr wrs[kMaxBatch];
    } batch;
    size_t posted = 0, size = kFirstBatch;
    *last = PostResult::kPosted;
    while (posted < run.count) {
      const size_t n = run.count - posted < size ? run.count - posted : size;
      for (size_t i = 0; i < n; ++i) new (&batch.wrs[i]) WriteWr(run.write(posted + i));
      const size_t done = post_writes(std::span<const WriteWr>(batch.wrs, n), last, error);
      posted += done;
      if (*last != PostResult::kPosted) break;
      if (size < kMaxBatch) size *= 2;
    }
    return posted;
  }
  virtual PostResult post_send(const SendWr& wr, Status* error) = 0;
  virtual PostResult post_recv(const RecvWr& wr, Status* error) = 0;

  // Control messages (the liveness probe): a channel separate from post_send/post_recv, so they
  // never land in the application's receive buffers. Optional: supports_control() says.
  virtual bool supports_control() const { return false; }
  virtual PostResult post_control_send(const SendWr& wr, Status* error) {
    if (error) *error = unsupported("control messages");
    return PostResult::kFailed;
  }
  virtual PostResult post_control_recv(const RecvWr& wr, Status* error) {
    if (error) *error = unsupported("control messages");
    return PostResult::kFailed;
  }

  // Appends up to `max` events; returns how many were appended. Also drives the provider's
  // progress, so it must be called regularly even when nothing is outstanding.
  virtual size_t poll(std::vector<Event>& out, size_t max) = 0;

  // A file descriptor that becomes readable when poll() may have work, or -1 when the domain
  // offers none (then the worker backs off by sleeping).
  virtual int wait_fd() const { return -1; }
  // Call right before blocking on wait_fd(): true when blocking is safe now (nothing is ready).
  virtual bool ready_to_block() { return false; }
  // True while the domain holds work of its own that needs more poll() calls (e.g. WRs held back
  // by a reordering wrapper); the worker does not sleep then.
  virtual bool has_deferred_work() const { return false; }

  // The counters this stack keeps, or null when it keeps none. Optional: a decorator that keeps
  // none forwards its inner domain's. Shared, so that a reader may keep them past the domain's
  // close; fetched once, on the worker thread, when the domain is opened.
  virtual std::shared_ptr<const DomainCounters> counters() const { return nullptr; }
};

}  // namespace fabric_lib::transport

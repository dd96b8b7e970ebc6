// The CopyEngine over the CUDA runtime (CUDA builds only): copies into any pointer of this process
// — peer GPU memory mapped with CUDA IPC, or pinned host memory — from GPU or host sources, on a
// small pool of non-blocking streams per device, so independent copies overlap and finish in any
// order.
//
// Copies submitted during one poll pass are issued together at the next progress() ("flush"):
//   - large copies, host sources, and every copy in kMemcpy mode: one cudaMemcpyAsync each (a
//     gather request: one per segment, all on the request's stream), spread round-robin over
//     the streams;
//   - small GPU-to-GPU copies (<= small_copy_bytes, both ends kCuda; for a gather request, its
//     segments): in kKernel mode (and kAuto, unless the flush holds just one plain copy) the
//     page-copy kernel (page_copy_kernel.h): each gather request is a run in the launch's
//     parameters and its segments are copied into a pinned host buffer as they are (plain copies
//     of one length share a run, their addresses as segments), and one launch moves them all. A
//     flush of more than kPiecesPerLaunch pieces or kMaxPageCopyRuns runs is split into launches
//     on different streams, so they run side by side; a request stays in one launch. In kBatch
//     mode one cudaMemcpyBatchAsync per flush, with every segment.
// Each stream used in a flush ends it with a completion word: the stream writes the flush's
// sequence number into pinned host memory (cuStreamWriteValue32, preceded by a system-wide fence)
// once its copies are complete (their bytes are in the target's memory), and progress() reads the
// word with a plain load. Not an event per flush: cudaEventQuery takes the driver's locks on
// every call, so a worker spinning on events while copies run slows every other thread's CUDA
// calls — the application's launches among them (measured on one H200: a thread launching the
// page-copy kernel over 4096 pages went from 9.4 to 29.7 µs per launch while another thread
// queried events). Polling words, the worker calls CUDA only to issue. A word that has not moved
// for kStreamQueryAfter is checked with cudaStreamQuery (a copy that failed never writes it:
// the stream's error is reported). Without the driver call (or with Options::completion_words
// off) each flush records an event instead. A gather request completes as one copy, with the
// flush of the one stream that all its segments went on.
// An operation that cannot be issued (a launch or cudaMemcpyAsync returning an error) ends its
// stream's whole flush with that error, the copies issued before it included (they landed; the
// stream is waited for before the failure is reported), and the rest of that flush is not issued.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <memory_resource>
#include <span>
#include <vector>

#include "gpu/copy_engine.h"
#include "gpu/copy_mode.h"
#include "gpu/device_guard.h"
#include "gpu/op_launcher.h"
#include "gpu/page_copy_kernel.h"
#include "gpu/pinned_segment_pool.h"

namespace fabric_lib::gpu {

class CudaCopyEngine final : public CopyEngine {
 public:
  struct Options {
    GpuCopyMode mode = GpuCopyMode::kAuto;
    size_t streams_per_device = 4;
    uint64_t small_copy_bytes = 256 * 1024;
    size_t max_inflight = 16384;
    // Flushes end with a completion word the stream writes (above); false: with an event.
    bool completion_words = true;
    // With completion words, in kKernel and kAuto modes (not kMemcpy: an op per page; not
    // kBatch), a launcher thread issues large flushes' stream operations: flushes of at least
    // `launcher_copies` copies (a gather's segments, each other copy one), and any flush while it
    // has ops queued; smaller ones are issued on the calling thread (no thread hop).
    // 0: no launcher thread (as the builder's `ipc_launcher_copies`); 1: every flush goes to it.
    // The thread runs on the process's CPUs less the creating thread's, when that thread is
    // pinned to one (a group worker): sharing the worker's core would undo the point of it.
    size_t launcher_copies = kDefaultLauncherCopies;
    // Page-copy kernel shape: a flush whose copies make fewer than this many 16 KiB pieces is cut
    // into smaller pieces (down to 2 KiB) so that its launches run more warps; 0: always 16 KiB.
    size_t min_launch_warps = 0;
    // 16-byte loads a lane of the page-copy kernel keeps in flight: 4 or 8 (any other count makes
    // every kernel launch fail: its copies are reported with cudaErrorInvalidValue; the builder
    // refuses such settings before they get here).
    uint32_t loads_per_lane = kDefaultCopyLoadsPerLane;
  };
  explicit CudaCopyEngine(Options options);
  ~CudaCopyEngine() override;

  CopySubmit submit(const CopyRequest& request, Status* error) override;
  // Room in pinned memory, where the page-copy kernel reads the segments (a submitted gather's
  // segments are copied there when they are elsewhere; without pinned memory they wait in a
  // vector and go the old way).
  std::span<CopySegment> segment_room(size_t n) override;
  // Page pairs in the same room, two to a segment's 16 bytes; a submitted gather's pairs that are
  // not in it are copied there too (without pinned memory: turned into segments).
  std::span<CopyPagePair> page_room(size_t n) override;
  void progress(std::vector<CopyDone>& done) override;
  size_t inflight() const override { return inflight_; }
  void drain() override;

  // Pieces one kernel launch takes before a flush spreads over another stream.
  static constexpr size_t kPiecesPerLaunch = 4096;
  // A stream whose oldest flush's word has not moved for this long is asked (cudaStreamQuery);
  // the clock is read every kClockEvery polls of it.
  static constexpr std::chrono::microseconds kStreamQueryAfter{1000};
  static constexpr uint32_t kClockEvery = 256;
  // Creates `device`'s streams and a few pinned segment buffers now, at set-up (registration),
  // rather than at the first copy, which may come while an application kernel spins. A flush
  // that needs more buffers (more launches in flight, or one of more than kPiecesPerLaunch
  // segments) allocates them then, once; they are kept until the engine is destroyed.
  Status prepare(int device);

 private:
  // Pinned host memory holding segments: one launch's, or the gathers' of one or more flushes
  // (segment_room). Free again once nothing holds it: each flush on a stream holds the buffers
  // its launches read until its word moves (or its event fires).
  using SegmentBuffer = PinnedSegmentPool::Buffer;
  // What the launcher publishes about a stream, read by the engine's thread.
  struct StreamShared {
    explicit StreamShared(size_t slots)  // a power of two
        : failed(std::make_unique<std::atomic<int32_t>[]>(slots)), fail_mask(static_cast<uint32_t>(slots - 1)) {}
    // The last flush whose operations were all issued (or failed and were ended).
    std::atomic<uint32_t> launched{0};
    // Per flush (by sequence number & fail_mask): the CUDA error that ended it, 0 if none. More
    // slots than flushes in flight (Options::max_inflight + 1, rounded up), so none is shared.
    std::unique_ptr<std::atomic<int32_t>[]> failed;
    uint32_t fail_mask;
  };
  struct StreamState;
  // One operation of a flush on one stream, issued in order by the launcher (op_launcher.h):
  // its ops form a group ended by the kWord or kEvent op.
  struct StreamOp {
    enum class Kind : uint8_t { kCopy, kLaunch, kBatch, kWord, kEvent };
    Kind kind = Kind::kCopy;
    bool last = false;
    int device = 0;
    uint32_t seq = 0;    // the flush's sequence number on its stream
    uint64_t group = 0;  // the stream's address and seq: one flush on one stream
    StreamState* stream = nullptr;
    cudaEvent_t event = nullptr;                                        // kEvent
    void* dst = nullptr;                                                // kCopy
    const void* src = nullptr;
    size_t bytes = 0;
    // kLaunch: the launch's parameters, kept in the flush's LaunchList (`launch_index` there
    // until end_flush points `launch` at them). Out of line: a PageCopyLaunch is 3.6 KB, and
    // every op, launch or not, was zeroed, then copied into the launcher's ring with it.
    uint32_t launch_index = 0;
    const PageCopyLaunch* launch = nullptr;
  };
  // Runs StreamOps (the launcher's Issuer; cuda_copy_engine_issuer.cc).
  struct Issuer {
    CudaCopyEngine* engine = nullptr;
    int device = -1;  // the launcher thread's current device
    int issue(const StreamOp& op, bool on_launcher);
    void failed(const StreamOp& op, int code, bool on_launcher);
  };
  // A flush's kernel launches' parameters on one stream. Its slots are reused from flush to
  // flush without being cleared (only the runs a launch counts are read); add() may move them,
  // so ops name their launch by index until the list stops growing (end_flush).
  struct LaunchList {
    std::vector<PageCopyLaunch> slots;  // [0, used): this flush's
    size_t used = 0;
    uint32_t add() {
      if (used == slots.size()) slots.emplace_back();
      return static_cast<uint32_t>(used++);
    }
    // Points `ops`' launches at their parameters here (which must then stay where they are).
    void bind(std::vector<StreamOp>& ops) {
      for (StreamOp& op : ops) {
        if (op.kind == StreamOp::Kind::kLaunch) op.launch = &slots[op.launch_index];
      }
    }
  };
  // One flush's copies on one stream, complete when the stream's completion word reaches `seq`
  // (or, with `event` set, when it fires).
  struct Flushed {
    cudaEvent_t event = nullptr;
    uint32_t seq = 0;
    std::vector<uint64_t> ops;
    std::vector<SegmentBuffer> buffers;  // held: the segments its launches read, released with the event
    LaunchList launches;  // read by the launcher until it has issued the flush's ops (retired after)
  };
  struct StreamState {
    explicit StreamState(std::pmr::memory_resource* pool) : flushed(pool) {}
    cudaStream_t stream = nullptr;
    std::pmr::deque<Flushed> flushed;  // its blocks recycled through pool_
    // The flush being issued on this stream: its ops and launches' buffers (become a Flushed).
    std::vector<uint64_t> issuing;
    std::vector<SegmentBuffer> issuing_buffers;
    LaunchList issuing_launches;
    // The completion word (pinned host memory, null without one): the stream writes each flush's
    // sequence number there after its copies; `issued` is the last number handed out.
    uint32_t* word = nullptr;
    void* word_on_device = nullptr;
    uint32_t issued = 0;
    uint32_t unmoved_polls = 0;  // polls since the oldest flush's word was last seen moving
    std::chrono::steady_clock::time_point unmoved_since{};  // set once kClockEvery polls passed
    // The flush being issued, as stream operations (emitted together at the end of the flush).
    std::vector<StreamOp> ops;
    std::unique_ptr<StreamShared> shared;  // made with the stream (device_state)
  };
  // A request until its flush: a gather's segments wait in the device's segment store (the
  // caller's span ends with submit()); `request.segments` points at them during the flush.
  // A gather whose segments went into pinned room keeps them there (`pinned`: request.segments
  // points at them, and the kernel reads them in place).
  struct Queued {
    CopyRequest request;
    size_t first = 0;  // its segments: [first, first + count) of the store
    size_t count = 0;  // 0: a plain copy, or a pinned gather
    bool pinned = false;
  };
  struct DeviceState {
    std::vector<StreamState> streams;
    void* words = nullptr;  // the streams' completion words, one cache line each (cudaFreeHost)
    size_t next = 0;
    std::vector<Queued> pending;
    std::vector<Queued> flushing;  // flush()'s copy of `pending`
    std::vector<CopySegment> pending_segments;
    std::vector<CopySegment> flushing_segments;
  };

  Result<DeviceState*> device_state(int device);
  // What the launcher thread does first: names itself and leaves a pinned creator's CPU.
  static std::function<void()> launcher_start();
  // Appends a copy / the built launch to `st`'s ops of the flush being issued.
  void add_copy(int device, StreamState& st, void* dst, const void* src, size_t bytes);
  // Ends `st`'s ops of this flush with its word (or event) and hands them over (or runs them
  // here); the flush's ops go to st.flushed. False: nothing could be queued to mark its end.
  bool end_flush(int device, StreamState& st, bool hand_over);
  void flush(int device, DeviceState& d, std::vector<CopyDone>& done);
  // Whether a request goes through add_small (the kernel or the batched call).
  bool is_small(const CopyRequest& r) const;
  // Adds small GPU-to-GPU copies to `st`'s ops as one kernel launch / one batched call; a
  // kernel launch's segment buffer (for plain copies and gathers not in pinned room) goes into
  // st.issuing_buffers, held. The kernel cuts copies into pieces of 1 << piece_shift bytes;
  // `pieces`: how many that makes of `small` (flush() counted them to cut its launches).
  // Not cudaSuccess: nothing was added (the copies fail).
  cudaError_t add_small(int device, std::span<const Queued* const> small, uint32_t piece_shift, size_t pieces,
                        StreamState& st);
  // One copy op per segment (or for the plain copy).
  void add_memcpy(int device, const CopyRequest& r, StreamState& st);
  cudaEvent_t take_event();
  // Whether the oldest flush on `st` is complete: cudaSuccess, cudaErrorNotReady, or the error
  // that ended it — its own (a failed op), or the stream's (`whole_stream` then set).
  cudaError_t query_oldest(StreamState& st, bool* whole_stream);
  // Ends `f` (its ops reported with `status` into `done` when `done` is not null) and keeps its
  // vectors for the next flush.
  void retire(Flushed& f, const Status& status, std::vector<CopyDone>* done);

  Options options_;
  Issuer issuer_;
  // Issues the flushes' stream operations: on its own thread when completion words are had
  // (kernel and auto modes), else on the calling thread.
  std::unique_ptr<OpLauncher<StreamOp, Issuer>> launcher_;
  // cuStreamWriteValue32 through the runtime (the library does not link libcuda); null: events.
  using WriteWord = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
  WriteWord write_word_ = nullptr;
  std::atomic<uint32_t> word_failures_{0};  // failed word writes (the first is logged)
  // A flush allocates nothing in steady state: the deques' blocks come back to this pool, the
  // per-stream lists and a retired flush's vectors are reused.
  std::pmr::unsynchronized_pool_resource pool_;
  std::vector<Flushed> spare_;  // retired flushes: empty vectors with capacity
  std::vector<const Queued*> small_;       // flush()'s kernel/batch copies
  std::vector<const CopyRequest*> plain_;  // flush()'s plain cudaMemcpyAsync copies, before merging
  std::map<int, DeviceState> devices_;
  std::vector<cudaEvent_t> free_events_;
  PinnedSegmentPool segments_{kPiecesPerLaunch};  // the launches' and the gathers' segment buffers
  // segment_room()'s buffers since the last flush (the last one being filled, room_used_
  // segments of it taken by submitted gathers), the room last handed out, and the buffers of the
  // flush being issued (every flush on a stream holds them all).
  std::vector<SegmentBuffer> room_buffers_;
  size_t room_used_ = 0;
  std::span<CopySegment> room_;
  std::vector<SegmentBuffer> flushing_room_;
  size_t inflight_ = 0;  // requests (a gather counts once)
  // kBatch mode's argument arrays, reused.
  std::vector<void*> batch_dsts_;
  std::vector<const void*> batch_srcs_;
  std::vector<size_t> batch_sizes_;
};

// Loads the copy engine's kernels into `device`'s context, once per device per process (thread
// safe). Call it at set-up, before application kernels that wait for copies run (page_copy_kernel.h
// says why): the ipc domain's registration of CUDA memory does. Not at the first copy: loading
// then could itself wait for a spinning kernel.
Status load_copy_kernels(int device);

}  // namespace fabric_lib::gpu

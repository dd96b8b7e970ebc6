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
// queried events). Polling words, the worker calls CUDA only to issue. A word that does not move for
// kStreamQueryEvery polls is checked with cudaStreamQuery (a copy that failed never writes it:
// the stream's error is reported). Without the driver call (or with Options::completion_words
// off) each flush records an event instead. A gather request completes as one copy, with the
// flush of the one stream that all its segments went on.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <deque>
#include <map>
#include <memory_resource>
#include <span>
#include <vector>

#include "gpu/copy_engine.h"
#include "gpu/copy_mode.h"
#include "gpu/device_guard.h"
#include "gpu/page_copy_kernel.h"

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
  };
  explicit CudaCopyEngine(Options options);
  ~CudaCopyEngine() override;

  CopySubmit submit(const CopyRequest& request, Status* error) override;
  // Room in pinned memory, where the page-copy kernel reads the segments (a submitted gather's
  // segments are copied there when they are elsewhere; without pinned memory they wait in a
  // vector and go the old way).
  std::span<CopySegment> segment_room(size_t n) override;
  void progress(std::vector<CopyDone>& done) override;
  size_t inflight() const override { return inflight_; }
  void drain() override;

  // Pieces one kernel launch takes before a flush spreads over another stream.
  static constexpr size_t kPiecesPerLaunch = 4096;
  // Polls of a stream whose oldest flush's word has not moved, between two cudaStreamQuery calls.
  static constexpr uint32_t kStreamQueryEvery = 256;
  // Creates `device`'s streams and a few pinned segment buffers now, at set-up (registration),
  // rather than at the first copy, which may come while an application kernel spins. A flush
  // that needs more buffers (more launches in flight, or one of more than kPiecesPerLaunch
  // segments) allocates them then, once; they are kept until the engine is destroyed.
  Status prepare(int device);

 private:
  // Pinned host memory holding segments: one launch's, or the gathers' of one or more flushes
  // (segment_room). Back in free_segments_ once nothing holds it: each flush on a stream holds
  // the buffers its launches read until its event fires.
  struct SegmentBuffer {
    PageCopySegment* segments = nullptr;
    size_t capacity = 0;
    uint32_t id = 0;  // index into all_segments_ and holds_
  };
  // One flush's copies on one stream, complete when the stream's completion word reaches `seq`
  // (or, with `event` set, when it fires).
  struct Flushed {
    cudaEvent_t event = nullptr;
    uint32_t seq = 0;
    std::vector<uint64_t> ops;
    std::vector<SegmentBuffer> buffers;  // held: the segments its launches read, released with the event
  };
  struct StreamState {
    explicit StreamState(std::pmr::memory_resource* pool) : flushed(pool) {}
    cudaStream_t stream = nullptr;
    std::pmr::deque<Flushed> flushed;  // its blocks recycled through pool_
    // The flush being issued on this stream: its ops and launches' buffers (become a Flushed).
    std::vector<uint64_t> issuing;
    std::vector<SegmentBuffer> issuing_buffers;
    // The completion word (pinned host memory, null without one): the stream writes each flush's
    // sequence number there after its copies; `issued` is the last number handed out.
    uint32_t* word = nullptr;
    void* word_on_device = nullptr;
    uint32_t issued = 0;
    uint32_t unmoved_polls = 0;  // polls since the oldest flush's word was last seen moving
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
  void flush(int device, DeviceState& d, std::vector<CopyDone>& done);
  // Whether a request goes through issue_small (the kernel or the batched call).
  bool is_small(const CopyRequest& r) const;
  // Issues small GPU-to-GPU copies as one kernel launch / one batched call on `stream`; a
  // kernel launch's segment buffer (for plain copies and gathers not in pinned room) goes into
  // `buffers`, held.
  cudaError_t issue_small(std::span<const Queued* const> small, cudaStream_t stream,
                          std::vector<SegmentBuffer>& buffers);
  // One cudaMemcpyAsync per segment (or for the plain copy) on `stream`.
  static cudaError_t issue_memcpy(const CopyRequest& r, cudaStream_t stream);
  cudaEvent_t take_event();
  // Ends the flush `f` issued on `st`: its completion word's write (or an event) queued on the
  // stream. Not cudaSuccess: neither could be queued.
  cudaError_t mark_end(StreamState& st, Flushed& f);
  // Whether the oldest flush on `st` is complete: cudaSuccess, cudaErrorNotReady, or the
  // stream's error.
  cudaError_t query_oldest(StreamState& st);
  // A pinned buffer for at least `segments` segments (a free one, else a new one); null
  // segments when pinned memory cannot be had.
  SegmentBuffer take_segments(size_t segments);
  // A newly allocated one (kept in all_segments_ until the destructor).
  SegmentBuffer new_segments(size_t segments);
  void hold(const SegmentBuffer& b) { ++holds_[b.id]; }
  // One hold fewer; at none the buffer is free again.
  void release(const SegmentBuffer& b);


  // Ends `f` (its ops reported with `status` into `done` when `done` is not null) and keeps its
  // vectors for the next flush.
  void retire(Flushed& f, const Status& status, std::vector<CopyDone>* done);

  Options options_;
  // cuStreamWriteValue32 through the runtime (the library does not link libcuda); null: events.
  using WriteWord = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
  WriteWord write_word_ = nullptr;
  // A flush allocates nothing in steady state: the deques' blocks come back to this pool, the
  // per-stream lists and a retired flush's vectors are reused.
  std::pmr::unsynchronized_pool_resource pool_;
  std::vector<Flushed> spare_;  // retired flushes: empty vectors with capacity
  std::vector<const Queued*> small_;       // flush()'s kernel/batch copies
  std::vector<const CopyRequest*> plain_;  // flush()'s plain cudaMemcpyAsync copies, before merging
  std::map<int, DeviceState> devices_;
  std::vector<cudaEvent_t> free_events_;
  std::vector<SegmentBuffer> free_segments_;
  std::vector<SegmentBuffer> all_segments_;  // freed by the destructor
  std::vector<uint32_t> holds_;              // per buffer: flushes in flight that read it
  // segment_room()'s buffers since the last flush (the last one being filled, room_used_
  // segments of it taken by submitted gathers), the room last handed out, and the buffers of the
  // flush being issued (every flush on a stream holds them all).
  std::vector<SegmentBuffer> room_buffers_;
  size_t room_used_ = 0;
  std::span<CopySegment> room_;
  std::vector<SegmentBuffer> flushing_room_;
  PageCopyLaunch launch_;                    // issue_small()'s kernel parameters, reused
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

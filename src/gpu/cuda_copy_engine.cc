#include "gpu/cuda_copy_engine.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <set>

#include "base/cpu_relax.h"
#include "gpu/cuda_status.h"
#include "gpu/page_copy_kernel.h"

namespace fabric_lib::gpu {
namespace {

// Calls f(src, dst) for each segment of `r` (once for a plain copy); stops at the first error.
template <typename F>
cudaError_t for_each_segment(const CopyRequest& r, F&& f) {
  const auto* src = static_cast<const uint8_t*>(r.src);
  auto* dst = static_cast<uint8_t*>(r.dst_ptr);
  if (r.segments.empty()) return f(src, dst);
  for (const CopySegment& s : r.segments) {
    const cudaError_t e = f(src + s.src_offset, dst + s.dst_offset);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

// Kernel pieces of a request: each segment's (or the plain copy's).
size_t pieces_of(const CopyRequest& r) { return page_copy_pieces(r.length) * segment_count(r); }

// A gather request's segments go to the kernel as they are.
static_assert(sizeof(CopySegment) == sizeof(PageCopySegment) &&
              offsetof(CopySegment, src_offset) == offsetof(PageCopySegment, src_offset) &&
              offsetof(CopySegment, dst_offset) == offsetof(PageCopySegment, dst_offset));

// Whether `r`, after `prev` (null: the first) in a launch, needs a kernel run of its own: a gather
// always (its bases and offsets), a plain copy unless it follows a plain copy of the same length
// (plain copies share a run with null bases, their addresses as offsets).
bool opens_run(const CopyRequest* prev, const CopyRequest& r) {
  return prev == nullptr || !r.segments.empty() || !prev->segments.empty() || prev->length != r.length;
}

}  // namespace

Status load_copy_kernels(int device) {
  static std::mutex mu;
  static std::set<int> loaded;
  std::lock_guard lock(mu);
  if (loaded.count(device)) return ok_status();
  DeviceGuard guard(device);
  if (guard.status() != cudaSuccess) return cuda_status("cudaSetDevice", guard.status());
  const cudaError_t e = load_page_copy_kernel();
  if (e != cudaSuccess) return cuda_status("loading the page-copy kernel", e);
  loaded.insert(device);
  return ok_status();
}

CudaCopyEngine::CudaCopyEngine(Options options) : options_(options) {
  issuer_.engine = this;
  if (options_.completion_words) {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", &fn, 12000, cudaEnableDefault, &found) == cudaSuccess &&
        found == cudaDriverEntryPointSuccess) {
      write_word_ = reinterpret_cast<WriteWord>(fn);
    } else {
      cudaGetLastError();  // not sticky; clear it (events then)
    }
  }
  // The launcher thread only where the engine's thread then makes no driver calls while copies
  // run (words, not events) and ops are few (not one per page: kMemcpy; kBatch's arrays are ours).
  const bool threaded = write_word_ && options_.launcher_thread && options_.mode != GpuCopyMode::kMemcpy &&
                        options_.mode != GpuCopyMode::kBatch;
  launcher_ = std::make_unique<OpLauncher<StreamOp, Issuer>>(256, &issuer_, std::chrono::microseconds(50), threaded,
                                                              launcher_start());
}

CudaCopyEngine::~CudaCopyEngine() {
  drain();
  launcher_.reset();  // its thread gone before the streams it issues on
  for (auto& [device, d] : devices_) {
    DeviceGuard guard(device);
    for (StreamState& s : d.streams) cudaStreamDestroy(s.stream);
    if (d.words) cudaFreeHost(d.words);
  }
  for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
}

Status CudaCopyEngine::prepare(int device) {
  Result<DeviceState*> d = device_state(device);
  if (!d.ok()) return d.status();
  // Enough segment buffers for a few launches in flight, so that steady traffic allocates none.
  // Best effort: without pinned memory the small copies go one cudaMemcpyAsync each.
  segments_.reserve(8);
  return ok_status();
}

std::span<CopySegment> CudaCopyEngine::segment_room(size_t n) {
  if (n == 0) return {};
  if (room_buffers_.empty() || room_buffers_.back().capacity - room_used_ < n) {
    SegmentBuffer b = segments_.take(n);
    if (!b.segments) return {};
    room_buffers_.push_back(b);
    room_used_ = 0;
  }
  const SegmentBuffer& b = room_buffers_.back();
  // The same 16-byte layout (static_assert above): the kernel reads what the caller writes.
  room_ = std::span<CopySegment>(reinterpret_cast<CopySegment*>(b.segments) + room_used_, b.capacity - room_used_);
  return room_;
}

Result<CudaCopyEngine::DeviceState*> CudaCopyEngine::device_state(int device) {
  auto it = devices_.find(device);
  if (it != devices_.end()) return &it->second;
  DeviceGuard guard(device);
  if (guard.status() != cudaSuccess) return cuda_status("cudaSetDevice", guard.status());
  DeviceState d;
  for (size_t i = 0; i < std::max<size_t>(1, options_.streams_per_device); ++i) {
    StreamState s(&pool_);
    // More failure slots than flushes can be in flight on a stream (each holds a request).
    s.shared = std::make_unique<StreamShared>(std::bit_ceil(std::max<size_t>(options_.max_inflight, 1) + 1));
    // Non-blocking: never wait for (or hold up) the application's work on the legacy stream.
    const cudaError_t e = cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
      for (StreamState& made : d.streams) cudaStreamDestroy(made.stream);
      return cuda_status("cudaStreamCreateWithFlags", e);
    }
    d.streams.push_back(std::move(s));
  }
  if (write_word_) {
    // One cache line per stream's word. Without pinned memory: events.
    constexpr size_t kLine = 64;
    if (cudaHostAlloc(&d.words, d.streams.size() * kLine, cudaHostAllocPortable | cudaHostAllocMapped) == cudaSuccess) {
      std::memset(d.words, 0, d.streams.size() * kLine);
      for (size_t i = 0; i < d.streams.size(); ++i) {
        auto* word = reinterpret_cast<uint32_t*>(static_cast<uint8_t*>(d.words) + i * kLine);
        void* on_device = nullptr;
        if (cudaHostGetDevicePointer(&on_device, word, 0) != cudaSuccess) {
          cudaGetLastError();
          continue;  // this stream's flushes record events
        }
        d.streams[i].word = word;
        d.streams[i].word_on_device = on_device;
      }
      // Once, at set-up: a driver that cannot write words from a stream gets events instead.
      StreamState& first = d.streams[0];
      if (first.word && (write_word_(first.stream, reinterpret_cast<CUdeviceptr>(first.word_on_device), 0,
                                     CU_STREAM_WRITE_VALUE_DEFAULT) != CUDA_SUCCESS ||
                         cudaStreamSynchronize(first.stream) != cudaSuccess)) {
        cudaGetLastError();
        for (StreamState& st : d.streams) st.word = nullptr;
      }
    } else {
      cudaGetLastError();
      d.words = nullptr;
    }
  }
  return &devices_.emplace(device, std::move(d)).first->second;
}

CopySubmit CudaCopyEngine::submit(const CopyRequest& r, Status* error) {
  if (r.dst_ptr == nullptr || r.dst_device < 0 || r.src == nullptr || r.length == 0) {
    if (error) *error = invalid_argument("GPU copy without a source or a target in this process");
    return CopySubmit::kFailed;
  }
  if (inflight_ >= options_.max_inflight) return CopySubmit::kAgain;
  Result<DeviceState*> d = device_state(r.dst_device);
  if (!d.ok()) {
    if (error) *error = d.status();
    return CopySubmit::kFailed;
  }
  DeviceState& state = **d;
  Queued q;
  q.request = r;
  q.request.segments = {};  // the caller's span ends here: keep the segments
  if (!r.segments.empty()) {
    // In pinned room where the kernel reads them: written there by the caller (segment_room),
    // or copied there now; else (no pinned memory) in the store until the flush.
    const size_t n = r.segments.size();
    const bool in_room = r.segments.data() == room_.data() && n <= room_.size();
    const std::span<CopySegment> room = in_room ? room_ : segment_room(n);
    if (room.size() >= n) {
      if (!in_room) std::memcpy(room.data(), r.segments.data(), r.segments.size_bytes());
      room_used_ += n;
      room_ = {};
      q.request.segments = room.first(n);
      q.pinned = true;
    } else {
      q.first = state.pending_segments.size();
      q.count = n;
      state.pending_segments.insert(state.pending_segments.end(), r.segments.begin(), r.segments.end());
    }
  }
  state.pending.push_back(q);
  ++inflight_;
  return CopySubmit::kAccepted;
}

cudaEvent_t CudaCopyEngine::take_event() {
  if (!free_events_.empty()) {
    cudaEvent_t e = free_events_.back();
    free_events_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) return nullptr;
  return e;
}

cudaError_t CudaCopyEngine::query_oldest(StreamState& st, bool* whole_stream) {
  const Flushed& f = st.flushed.front();
  cudaError_t e = cudaSuccess;
  if (f.event) {
    // A never recorded event says done: ask it only once the launcher has issued (or failed)
    // the flush's ops.
    const uint32_t launched = st.shared->launched.load(std::memory_order_acquire);
    if (static_cast<int32_t>(launched - f.seq) < 0) return cudaErrorNotReady;
    e = cudaEventQuery(f.event);
    if (e == cudaErrorNotReady) return e;
    *whole_stream = e != cudaSuccess;
  } else {
    // Sequence numbers wrap: the word has reached `seq` when it is not behind it.
    const uint32_t word = std::atomic_ref<uint32_t>(*st.word).load(std::memory_order_acquire);
    if (static_cast<int32_t>(word - f.seq) < 0) {
      // A faulting copy never writes its word: after kStreamQueryAfter without a move, ask the
      // stream — once its ops were all issued (before that an empty stream says nothing).
      if (++st.unmoved_polls % kClockEvery != 0) return cudaErrorNotReady;
      const auto now = std::chrono::steady_clock::now();
      if (st.unmoved_since == std::chrono::steady_clock::time_point{}) st.unmoved_since = now;
      if (now - st.unmoved_since < kStreamQueryAfter) return cudaErrorNotReady;
      const uint32_t launched = st.shared->launched.load(std::memory_order_acquire);
      if (static_cast<int32_t>(launched - f.seq) < 0) return cudaErrorNotReady;
      st.unmoved_since = now;
      e = cudaStreamQuery(st.stream);
      if (e == cudaErrorNotReady) return e;
      *whole_stream = e != cudaSuccess;
    }
  }
  // Complete: ended by an error of its own?
  const int32_t failed = st.shared->failed[f.seq & st.shared->fail_mask].exchange(0, std::memory_order_acquire);
  if (failed != 0) {
    *whole_stream = false;
    return static_cast<cudaError_t>(failed);
  }
  return e;
}

bool CudaCopyEngine::is_small(const CopyRequest& r) const {
  return options_.mode != GpuCopyMode::kMemcpy && r.src_kind == MemoryKind::kCuda && r.dst_kind == MemoryKind::kCuda &&
         r.length <= options_.small_copy_bytes;
}

void CudaCopyEngine::add_copy(int device, StreamState& st, void* dst, const void* src, size_t bytes) {
  StreamOp& op = st.ops.emplace_back();
  op.kind = StreamOp::Kind::kCopy;
  op.device = device;
  op.dst = dst;
  op.src = src;
  op.bytes = bytes;
}

void CudaCopyEngine::add_memcpy(int device, const CopyRequest& r, StreamState& st) {
  for_each_segment(r, [&](const uint8_t* src, uint8_t* dst) {
    add_copy(device, st, dst, src, r.length);
    return cudaSuccess;
  });
}

cudaError_t CudaCopyEngine::add_small(int device, std::span<const Queued* const> small, StreamState& st) {
  if (options_.mode == GpuCopyMode::kBatch) {
    batch_dsts_.clear();
    batch_srcs_.clear();
    batch_sizes_.clear();
    for (const Queued* q : small) {
      const CopyRequest& r = q->request;
      for_each_segment(r, [&](const uint8_t* src, uint8_t* dst) {
        batch_dsts_.push_back(dst);
        batch_srcs_.push_back(src);
        batch_sizes_.push_back(r.length);
        return cudaSuccess;
      });
    }
    StreamOp& op = st.ops.emplace_back();
    op.kind = StreamOp::Kind::kBatch;
    op.device = device;
    return cudaSuccess;
  }
  // Pairs the launch needs a buffer for: plain copies' and gathers' not in pinned room.
  size_t copies = 0, pieces = 0;
  for (const Queued* q : small) {
    if (!q->pinned) copies += segment_count(q->request);
    pieces += pieces_of(q->request);
  }
  if (pieces > UINT32_MAX) return cudaErrorInvalidValue;  // more warps than a launch counts
  SegmentBuffer b;
  if (copies > 0) {
    b = segments_.take(copies);
    if (!b.segments) {  // no pinned memory: one cudaMemcpyAsync each (slow, but the copies go)
      for (const Queued* q : small) add_memcpy(device, q->request, st);
      return cudaSuccess;
    }
    segments_.hold(b);
    st.issuing_buffers.push_back(b);
  }
  // The runs into the launch's parameters: a gather in pinned room is read where it is; other
  // offset pairs go into the launch's buffer (a gather's with one memcpy). flush() cut `small`
  // to at most kMaxPageCopyRuns runs.
  StreamOp& op = st.ops.emplace_back();
  op.kind = StreamOp::Kind::kLaunch;
  op.device = device;
  PageCopyLaunch& launch = op.launch;
  launch.run_count = 0;
  launch.warps = 0;
  size_t k = 0;
  const CopyRequest* prev = nullptr;
  for (const Queued* q : small) {
    const CopyRequest& r = q->request;
    if (opens_run(prev, r)) {
      if (launch.run_count == kMaxPageCopyRuns) {  // flush() prevents it
        st.ops.pop_back();
        return cudaErrorInvalidValue;
      }
      const bool gather = !r.segments.empty();
      const PageCopySegment* pairs = q->pinned ? reinterpret_cast<const PageCopySegment*>(r.segments.data()) : b.segments + k;
      launch.runs[launch.run_count++] = {gather ? static_cast<const uint8_t*>(r.src) : nullptr,
                                         gather ? static_cast<uint8_t*>(r.dst_ptr) : nullptr, r.length, pairs, 0,
                                         launch.warps};
    }
    PageCopyRun& run = launch.runs[launch.run_count - 1];
    if (!q->pinned) {
      if (!r.segments.empty()) {
        std::memcpy(b.segments + k, r.segments.data(), r.segments.size_bytes());
      } else {
        b.segments[k] = {reinterpret_cast<uintptr_t>(r.src), reinterpret_cast<uintptr_t>(r.dst_ptr)};
      }
      k += segment_count(r);
    }
    run.copies += static_cast<uint32_t>(segment_count(r));
    launch.warps += static_cast<uint32_t>(pieces_of(r));
    prev = &r;
  }
  return cudaSuccess;
}

bool CudaCopyEngine::end_flush(int device, StreamState& st, bool hand_over) {
  const uint32_t seq = ++st.issued;
  Flushed f;
  if (!spare_.empty()) {
    f = std::move(spare_.back());
    spare_.pop_back();
  }
  StreamOp& end = st.ops.emplace_back();
  end.device = device;
  if (write_word_ && st.word) {
    end.kind = StreamOp::Kind::kWord;
    f.event = nullptr;
  } else {
    end.kind = StreamOp::Kind::kEvent;
    end.event = take_event();
    if (!end.event) {
      st.ops.pop_back();
      --st.issued;
      spare_.push_back(std::move(f));
      return false;
    }
    f.event = end.event;
  }
  end.last = true;
  f.seq = seq;
  f.ops.swap(st.issuing);
  f.buffers.swap(st.issuing_buffers);
  st.flushed.push_back(std::move(f));
  const uint64_t group = (reinterpret_cast<uintptr_t>(&st) << 16) ^ seq;
  for (StreamOp& op : st.ops) {
    op.stream = &st;
    op.seq = seq;
    op.group = group;
    if (hand_over) launcher_->push(op);
    else launcher_->run_inline(op);
  }
  st.ops.clear();
  return true;
}

void CudaCopyEngine::flush(int device, DeviceState& d, std::vector<CopyDone>& done) {
  // Swapped, not moved: the vectors keep their capacity, so a steady flow allocates nothing.
  d.flushing.swap(d.pending);
  d.pending.clear();
  d.flushing_segments.swap(d.pending_segments);
  d.pending_segments.clear();
  for (Queued& q : d.flushing) {
    if (!q.pinned && q.count > 0) q.request.segments = std::span<const CopySegment>(d.flushing_segments.data() + q.first, q.count);
  }
  auto fail = [&](uint64_t op, const Status& why) {
    done.push_back({op, why});
    --inflight_;
  };
  DeviceGuard guard(device);
  if (guard.status() != cudaSuccess) {
    for (const Queued& q : d.flushing) fail(q.request.op, cuda_status("cudaSetDevice", guard.status()));
    return;
  }
  const size_t n = d.streams.size();
  std::vector<const Queued*>& small = small_;
  small.clear();
  auto issued = [&](size_t s) -> std::vector<uint64_t>& { return d.streams[s].issuing; };
  std::vector<const CopyRequest*>& plain = plain_;
  plain.clear();
  for (const Queued& q : d.flushing) {
    const CopyRequest& r = q.request;
    if (is_small(r)) {
      small.push_back(&q);
      continue;
    }
    if (r.segments.empty()) {
      plain.push_back(&r);  // issued below, merged with the copies that continue it
      continue;
    }
    const size_t s = d.next++ % n;
    add_memcpy(device, r, d.streams[s]);
    issued(s).push_back(r.op);
  }
  // Plain copies of one merge group that continue each other at both ends (the shards of one
  // write, posted on a group's several domains, which share this engine) go as one
  // cudaMemcpyAsync: their ops complete together, as the one copy they are.
  std::sort(plain.begin(), plain.end(), [](const CopyRequest* a, const CopyRequest* b) { return a->src < b->src; });
  for (size_t i = 0; i < plain.size();) {
    const CopyRequest& first = *plain[i];
    const auto* src = static_cast<const uint8_t*>(first.src);
    auto* dst = static_cast<uint8_t*>(first.dst_ptr);
    uint64_t length = first.length;
    size_t j = i + 1;
    while (j < plain.size() && first.merge_group != 0 && plain[j]->merge_group == first.merge_group &&
           plain[j]->src == src + length && plain[j]->dst_ptr == dst + length) {
      length += plain[j]->length;
      ++j;
    }
    const size_t s = d.next++ % n;
    add_copy(device, d.streams[s], dst, src, length);
    for (size_t k = i; k < j; ++k) issued(s).push_back(plain[k]->op);
    i = j;
  }
  if (small.size() == 1 && small[0]->request.segments.empty() && options_.mode == GpuCopyMode::kAuto) {
    // One plain copy: no batch to win.
    const CopyRequest& r = small[0]->request;
    const size_t s = d.next++ % n;
    add_copy(device, d.streams[s], r.dst_ptr, r.src, r.length);
    issued(s).push_back(r.op);
    small.clear();
  }
  // Kernel mode: one launch for the whole flush, or, past kPiecesPerLaunch pieces, launches of
  // about equal size on different streams, so that they run side by side. A request's pieces
  // stay in one launch (its op completes with that launch's stream). Batch mode: one call.
  size_t total = 0;
  for (const Queued* q : small) total += pieces_of(q->request);
  const size_t per_launch = options_.mode == GpuCopyMode::kBatch ? SIZE_MAX : std::max(kPiecesPerLaunch, (total + n - 1) / n);
  const size_t max_runs = options_.mode == GpuCopyMode::kBatch ? SIZE_MAX : kMaxPageCopyRuns;
  for (size_t i = 0; i < small.size();) {
    size_t j = i;
    size_t pieces = 0, runs = 0;
    while (j < small.size()) {
      const size_t more_runs = runs + (opens_run(j == i ? nullptr : &small[j - 1]->request, small[j]->request) ? 1 : 0);
      if (j > i && (pieces + pieces_of(small[j]->request) > per_launch || more_runs > max_runs)) break;
      pieces += pieces_of(small[j]->request);
      runs = more_runs;
      ++j;
    }
    const std::span<const Queued* const> part(small.data() + i, j - i);
    i = j;
    const size_t s = d.next++ % n;
    const cudaError_t e = add_small(device, part, d.streams[s]);
    if (e != cudaSuccess) {
      const char* what = options_.mode == GpuCopyMode::kBatch ? "cudaMemcpyBatchAsync" : "page-copy kernel launch";
      for (const Queued* q : part) fail(q->request.op, cuda_status(what, e));
    } else {
      for (const Queued* q : part) issued(s).push_back(q->request.op);
    }
  }
  // Large flushes (or any while the launcher is busy, to keep each stream's order) go to the
  // launcher; small ones are issued here, without a thread hop.
  // Streams without a completion word (events) are never handed over: their flushes are
  // queried with cudaEventQuery, which must not run beside the launcher's launches (gpu.md), and
  // having never been handed over, they have no ops queued there to overtake.
  const bool hand_over = launcher_->threaded() && (total >= options_.launcher_pieces || !launcher_->idle());
  for (size_t s = 0; s < n; ++s) {
    StreamState& st = d.streams[s];
    if (st.issuing.empty()) {
      // Only failed launches used these buffers (and queued no ops).
      for (const SegmentBuffer& b : st.issuing_buffers) segments_.release(b);
      st.issuing_buffers.clear();
      st.ops.clear();
      continue;
    }
    // Its launches may read gathers' segments in any of the flush's room buffers.
    for (const SegmentBuffer& b : flushing_room_) {
      segments_.hold(b);
      st.issuing_buffers.push_back(b);
    }
    if (!end_flush(device, st, hand_over && st.word != nullptr)) {
      // No event to mark its end (rare): issue here (after the launcher's ops, which may be on
      // this stream), wait, and report what the stream says.
      // The first op that cannot be issued ends it (the rest are not issued).
      while (!launcher_->idle()) cpu_relax();
      int code = 0;
      for (StreamOp& op : st.ops) {
        op.stream = &st;
        if ((code = issuer_.issue(op, false)) != 0) break;
      }
      st.ops.clear();
      cudaGetLastError();
      const cudaError_t sync = cudaStreamSynchronize(st.stream);
      cudaGetLastError();
      const int error = sync != cudaSuccess ? sync : code;
      Flushed f;
      f.ops.swap(st.issuing);
      f.buffers.swap(st.issuing_buffers);
      retire(f, error == 0 ? ok_status() : cuda_status("GPU copy", static_cast<cudaError_t>(error)), &done);
    }
  }
}

void CudaCopyEngine::retire(Flushed& f, const Status& status, std::vector<CopyDone>* done) {
  if (done) {
    for (uint64_t op : f.ops) done->push_back({op, status});
  }
  inflight_ -= std::min(inflight_, f.ops.size());
  if (f.event) free_events_.push_back(f.event);
  f.event = nullptr;
  for (const SegmentBuffer& b : f.buffers) segments_.release(b);
  f.ops.clear();
  f.buffers.clear();
}

void CudaCopyEngine::progress(std::vector<CopyDone>& done) {
  // The gathers' room goes with this progress's flushes (each holds it); what no flush holds
  // (every copy failed, or none read it) is free again right after.
  bool pending = false;
  for (auto& [device, d] : devices_) pending = pending || !d.pending.empty();
  if (pending) {
    flushing_room_.swap(room_buffers_);
    room_buffers_.clear();
    room_used_ = 0;
    room_ = {};
  }
  for (auto& [device, d] : devices_) {
    if (!d.pending.empty()) flush(device, d, done);
  }
  for (const SegmentBuffer& b : flushing_room_) segments_.give_back_unless_held(b);
  flushing_room_.clear();
  for (auto& [device, d] : devices_) {
    for (StreamState& s : d.streams) {
      while (!s.flushed.empty()) {
        bool whole_stream = false;
        const cudaError_t e = query_oldest(s, &whole_stream);
        if (e == cudaErrorNotReady) break;
        s.unmoved_polls = 0;
        s.unmoved_since = {};
        // The stream's own error ends every flush issued on it: their words will not move
        // either. (Flushes the launcher has not issued yet end by themselves: their ops fail.)
        size_t ended = 1;
        if (whole_stream) {
          const uint32_t launched = s.shared->launched.load(std::memory_order_acquire);
          while (ended < s.flushed.size() && static_cast<int32_t>(launched - s.flushed[ended].seq) >= 0) ++ended;
        }
        for (size_t i = 0; i < ended; ++i) {
          Flushed& f = s.flushed.front();
          s.shared->failed[f.seq & s.shared->fail_mask].store(0, std::memory_order_relaxed);
          retire(f, e == cudaSuccess ? ok_status() : cuda_status("GPU copy", e), &done);
          spare_.push_back(std::move(f));
          s.flushed.pop_front();
        }
      }
    }
  }
}

void CudaCopyEngine::drain() {
  while (!launcher_->idle()) cpu_relax();  // every flush's ops issued before the streams are waited for
  for (auto& [device, d] : devices_) {
    DeviceGuard guard(device);
    inflight_ -= std::min(inflight_, d.pending.size());
    d.pending.clear();
    d.pending_segments.clear();
    for (StreamState& s : d.streams) {
      if (!s.flushed.empty()) cudaStreamSynchronize(s.stream);
      for (Flushed& f : s.flushed) {
        s.shared->failed[f.seq & s.shared->fail_mask].store(0, std::memory_order_relaxed);
        retire(f, ok_status(), nullptr);
      }
      s.flushed.clear();
    }
  }
  // The dropped copies' room (never flushed, so never held) is free again.
  for (const SegmentBuffer& b : room_buffers_) segments_.give_back_unless_held(b);
  room_buffers_.clear();
  room_used_ = 0;
  room_ = {};
}

}  // namespace fabric_lib::gpu

#include "gpu/cuda_copy_engine.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <set>

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
  if (!options_.completion_words) return;
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", &fn, 12000, cudaEnableDefault, &found) == cudaSuccess &&
      found == cudaDriverEntryPointSuccess) {
    write_word_ = reinterpret_cast<WriteWord>(fn);
  } else {
    cudaGetLastError();  // not sticky; clear it (events then)
  }
}

CudaCopyEngine::~CudaCopyEngine() {
  drain();
  for (auto& [device, d] : devices_) {
    DeviceGuard guard(device);
    for (StreamState& s : d.streams) cudaStreamDestroy(s.stream);
    if (d.words) cudaFreeHost(d.words);
  }
  for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
  for (SegmentBuffer& b : all_segments_) cudaFreeHost(b.segments);
}

Status CudaCopyEngine::prepare(int device) {
  Result<DeviceState*> d = device_state(device);
  if (!d.ok()) return d.status();
  // Enough segment buffers for a few launches in flight, so that steady traffic allocates none.
  // Best effort: without pinned memory the small copies go one cudaMemcpyAsync each.
  while (all_segments_.size() < 8) {
    SegmentBuffer b = new_segments(kPiecesPerLaunch);
    if (!b.segments) break;
    free_segments_.push_back(b);
  }
  return ok_status();
}

CudaCopyEngine::SegmentBuffer CudaCopyEngine::take_segments(size_t segments) {
  auto best = free_segments_.end();
  for (auto it = free_segments_.begin(); it != free_segments_.end(); ++it) {
    if (it->capacity >= segments && (best == free_segments_.end() || it->capacity < best->capacity)) best = it;
  }
  if (best != free_segments_.end()) {
    SegmentBuffer b = *best;
    *best = free_segments_.back();
    free_segments_.pop_back();
    return b;
  }
  return new_segments(segments);
}

CudaCopyEngine::SegmentBuffer CudaCopyEngine::new_segments(size_t segments) {
  SegmentBuffer b;
  b.capacity = std::bit_ceil(std::max(segments, kPiecesPerLaunch));
  void* p = nullptr;
  // Portable: any device's kernel may read it (through unified addressing, at the same address).
  if (cudaHostAlloc(&p, b.capacity * sizeof(PageCopySegment), cudaHostAllocPortable | cudaHostAllocMapped) !=
      cudaSuccess) {
    cudaGetLastError();  // not sticky; clear it
    return {};
  }
  b.segments = static_cast<PageCopySegment*>(p);
  b.id = static_cast<uint32_t>(all_segments_.size());
  all_segments_.push_back(b);
  holds_.push_back(0);
  return b;
}

void CudaCopyEngine::release(const SegmentBuffer& b) {
  if (holds_[b.id] > 0 && --holds_[b.id] == 0) free_segments_.push_back(b);
}

std::span<CopySegment> CudaCopyEngine::segment_room(size_t n) {
  if (n == 0) return {};
  if (room_buffers_.empty() || room_buffers_.back().capacity - room_used_ < n) {
    SegmentBuffer b = take_segments(n);
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

cudaError_t CudaCopyEngine::mark_end(StreamState& st, Flushed& f) {
  if (write_word_ && st.word) {
    const uint32_t seq = st.issued + 1;
    // Default flags: the write waits for the stream's earlier work and follows a system-wide
    // fence, so the flush's bytes are visible wherever they went before the word moves.
    const CUresult r = write_word_(st.stream, reinterpret_cast<CUdeviceptr>(st.word_on_device), seq,
                                   CU_STREAM_WRITE_VALUE_DEFAULT);
    if (r == CUDA_SUCCESS) {
      st.issued = seq;
      f.seq = seq;
      f.event = nullptr;
      return cudaSuccess;
    }
    // Not supported here (or failing): events from now on; a word already queued still moves.
    write_word_ = nullptr;
  }
  cudaEvent_t ev = take_event();
  if (!ev) return cudaErrorMemoryAllocation;
  const cudaError_t e = cudaEventRecord(ev, st.stream);
  if (e != cudaSuccess) {
    free_events_.push_back(ev);
    return e;
  }
  f.event = ev;
  return cudaSuccess;
}

cudaError_t CudaCopyEngine::query_oldest(StreamState& st) {
  const Flushed& f = st.flushed.front();
  if (f.event) return cudaEventQuery(f.event);
  // Sequence numbers wrap: the word has reached `seq` when it is not behind it.
  const uint32_t word = std::atomic_ref<uint32_t>(*st.word).load(std::memory_order_acquire);
  if (static_cast<int32_t>(word - f.seq) >= 0) return cudaSuccess;
  if (++st.unmoved_polls < kStreamQueryEvery) return cudaErrorNotReady;
  // A failed copy never writes its word: ask the stream. Done means every flush on it is (its
  // words written; the caller retires them one by one), an error is the stream's.
  st.unmoved_polls = 0;
  return cudaStreamQuery(st.stream);
}

bool CudaCopyEngine::is_small(const CopyRequest& r) const {
  return options_.mode != GpuCopyMode::kMemcpy && r.src_kind == MemoryKind::kCuda && r.dst_kind == MemoryKind::kCuda &&
         r.length <= options_.small_copy_bytes;
}

cudaError_t CudaCopyEngine::issue_memcpy(const CopyRequest& r, cudaStream_t stream) {
  return for_each_segment(r, [&](const uint8_t* src, uint8_t* dst) {
    return cudaMemcpyAsync(dst, src, r.length, cudaMemcpyDefault, stream);
  });
}

cudaError_t CudaCopyEngine::issue_small(std::span<const Queued* const> small, cudaStream_t stream,
                                        std::vector<SegmentBuffer>& buffers) {
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
    cudaMemcpyAttributes attr{};
    attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    size_t attr_index = 0;
    return cudaMemcpyBatchAsync(batch_dsts_.data(), batch_srcs_.data(), batch_sizes_.data(), batch_dsts_.size(), &attr,
                                &attr_index, 1, stream);
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
    b = take_segments(copies);
    if (!b.segments) {  // no pinned memory: one cudaMemcpyAsync each (slow, but the copies go)
      for (const Queued* q : small) {
        const cudaError_t e = issue_memcpy(q->request, stream);
        if (e != cudaSuccess) return e;
      }
      return cudaSuccess;
    }
    hold(b);
    buffers.push_back(b);
  }
  // The runs into the launch's parameters: a gather in pinned room is read where it is; other
  // offset pairs go into the launch's buffer (a gather's with one memcpy). flush() cut `small`
  // to at most kMaxPageCopyRuns runs.
  PageCopyLaunch& launch = launch_;
  launch.run_count = 0;
  launch.warps = 0;
  size_t k = 0;
  const CopyRequest* prev = nullptr;
  for (const Queued* q : small) {
    const CopyRequest& r = q->request;
    if (opens_run(prev, r)) {
      if (launch.run_count == kMaxPageCopyRuns) return cudaErrorInvalidValue;  // flush() prevents it
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
  return launch_page_copy(launch, stream);
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
    const cudaError_t e = issue_memcpy(r, d.streams[s].stream);
    if (e != cudaSuccess) {
      // A gather's earlier segments may be running: none of its bytes may land after its failure.
      cudaStreamSynchronize(d.streams[s].stream);
      fail(r.op, cuda_status("cudaMemcpyAsync", e));
    } else {
      issued(s).push_back(r.op);
    }
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
    const cudaError_t e = cudaMemcpyAsync(dst, src, length, cudaMemcpyDefault, d.streams[s].stream);
    for (size_t k = i; k < j; ++k) {
      if (e != cudaSuccess) fail(plain[k]->op, cuda_status("cudaMemcpyAsync", e));
      else issued(s).push_back(plain[k]->op);
    }
    i = j;
  }
  if (small.size() == 1 && small[0]->request.segments.empty() && options_.mode == GpuCopyMode::kAuto) {
    // One plain copy: no batch to win.
    const CopyRequest& r = small[0]->request;
    const size_t s = d.next++ % n;
    const cudaError_t e = cudaMemcpyAsync(r.dst_ptr, r.src, r.length, cudaMemcpyDefault, d.streams[s].stream);
    if (e != cudaSuccess) fail(r.op, cuda_status("cudaMemcpyAsync", e));
    else issued(s).push_back(r.op);
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
    const cudaError_t e = issue_small(part, d.streams[s].stream, d.streams[s].issuing_buffers);
    if (e != cudaSuccess) {
      // The launch failed: wait for the stream, so no failed op's copy can still land later.
      cudaStreamSynchronize(d.streams[s].stream);
      const char* what = options_.mode == GpuCopyMode::kBatch ? "cudaMemcpyBatchAsync" : "page-copy kernel launch";
      for (const Queued* q : part) fail(q->request.op, cuda_status(what, e));
    } else {
      for (const Queued* q : part) issued(s).push_back(q->request.op);
    }
  }
  for (size_t s = 0; s < n; ++s) {
    StreamState& st = d.streams[s];
    if (st.issuing.empty()) {
      // Only failed launches used these buffers.
      for (const SegmentBuffer& b : st.issuing_buffers) release(b);
      st.issuing_buffers.clear();
      continue;
    }
    // Its launches may read gathers' segments in any of the flush's room buffers.
    for (const SegmentBuffer& b : flushing_room_) {
      hold(b);
      st.issuing_buffers.push_back(b);
    }
    Flushed f;
    if (!spare_.empty()) {
      f = std::move(spare_.back());
      spare_.pop_back();
    }
    f.ops.swap(st.issuing);
    f.buffers.swap(st.issuing_buffers);
    if (mark_end(st, f) != cudaSuccess) {
      // Nothing to watch: wait here instead (rare), and report what the stream says.
      const cudaError_t sync = cudaStreamSynchronize(st.stream);
      retire(f, sync == cudaSuccess ? ok_status() : cuda_status("GPU copy", sync), &done);
      spare_.push_back(std::move(f));
      continue;
    }
    st.flushed.push_back(std::move(f));
  }
}

void CudaCopyEngine::retire(Flushed& f, const Status& status, std::vector<CopyDone>* done) {
  if (done) {
    for (uint64_t op : f.ops) done->push_back({op, status});
  }
  inflight_ -= std::min(inflight_, f.ops.size());
  if (f.event) free_events_.push_back(f.event);
  f.event = nullptr;
  for (const SegmentBuffer& b : f.buffers) release(b);
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
  for (const SegmentBuffer& b : flushing_room_) {
    if (holds_[b.id] == 0) free_segments_.push_back(b);
  }
  flushing_room_.clear();
  for (auto& [device, d] : devices_) {
    for (StreamState& s : d.streams) {
      while (!s.flushed.empty()) {
        const cudaError_t e = query_oldest(s);
        if (e == cudaErrorNotReady) break;
        s.unmoved_polls = 0;
        // A stream's error ends every flush on it: its later words will not move either.
        const size_t ended = e == cudaSuccess ? 1 : s.flushed.size();
        for (size_t i = 0; i < ended; ++i) {
          Flushed& f = s.flushed.front();
          retire(f, e == cudaSuccess ? ok_status() : cuda_status("GPU copy", e), &done);
          spare_.push_back(std::move(f));
          s.flushed.pop_front();
        }
      }
    }
  }
}

void CudaCopyEngine::drain() {
  for (auto& [device, d] : devices_) {
    DeviceGuard guard(device);
    inflight_ -= std::min(inflight_, d.pending.size());
    d.pending.clear();
    d.pending_segments.clear();
    for (StreamState& s : d.streams) {
      if (!s.flushed.empty()) cudaStreamSynchronize(s.stream);
      for (Flushed& f : s.flushed) retire(f, ok_status(), nullptr);
      s.flushed.clear();
    }
  }
  // The dropped copies' room (never flushed, so never held) is free again.
  free_segments_.insert(free_segments_.end(), room_buffers_.begin(), room_buffers_.end());
  room_buffers_.clear();
  room_used_ = 0;
  room_ = {};
}

}  // namespace fabric_lib::gpu

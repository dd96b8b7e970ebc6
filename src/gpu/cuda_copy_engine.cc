// The copy engine's set-up (streams, completion words, pinned room), submit(), and how flushes
// end: progress() reads each stream's word or event and reports the copies. How a flush is planned
// and issued: cuda_copy_engine_flush.cc, cuda_copy_engine_issuer.cc.
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

// A gather request's segments go to the kernel as they are.
static_assert(sizeof(CopySegment) == sizeof(PageCopySegment) &&
              offsetof(CopySegment, src_offset) == offsetof(PageCopySegment, src_offset) &&
              offsetof(CopySegment, dst_offset) == offsetof(PageCopySegment, dst_offset));

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
  const bool threaded = write_word_ && options_.launcher_copies > 0 && options_.mode != GpuCopyMode::kMemcpy &&
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

std::span<CopyPagePair> CudaCopyEngine::page_room(size_t n) {
  const std::span<CopySegment> room = segment_room((n + 1) / 2);
  return std::span<CopyPagePair>(reinterpret_cast<CopyPagePair*>(room.data()), room.size() * 2);
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
  q.request.segments = {};  // the caller's spans end here: keep the segments (or pairs)
  q.request.pages = {};
  if (!r.pages.empty()) {
    // Page pairs: in the pinned room as they are (two to a segment's room), else as segments in
    // the store, the way a gather without pinned memory goes.
    const size_t n = r.pages.size();
    const size_t units = (n + 1) / 2;
    const auto* room_pairs = reinterpret_cast<const CopyPagePair*>(room_.data());
    const bool in_room = r.pages.data() == room_pairs && units <= room_.size();
    const std::span<CopyPagePair> room = in_room ? std::span<CopyPagePair>() : page_room(n);
    if (in_room || room.size() >= n) {
      CopyPagePair* at = in_room ? reinterpret_cast<CopyPagePair*>(room_.data()) : room.data();
      if (!in_room) std::memcpy(at, r.pages.data(), r.pages.size_bytes());
      room_used_ += units;
      room_ = {};
      q.request.pages = std::span<const CopyPagePair>(at, n);
      q.pinned = true;
    } else {
      q.request.src_stride = q.request.dst_stride = 0;
      q.first = state.pending_segments.size();
      q.count = n;
      for (size_t i = 0; i < n; ++i) state.pending_segments.push_back(copy_offsets(r, i));
    }
  } else if (!r.segments.empty()) {
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
  f.launches.used = 0;
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

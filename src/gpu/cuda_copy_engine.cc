#include "gpu/cuda_copy_engine.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <set>

#include "gpu/cuda_status.h"
#include "gpu/page_copy_kernel.h"

namespace fabric_lib::gpu {

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

CudaCopyEngine::~CudaCopyEngine() {
  drain();
  for (auto& [device, d] : devices_) {
    DeviceGuard guard(device);
    for (StreamState& s : d.streams) cudaStreamDestroy(s.stream);
  }
  for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
  for (PieceBuffer& b : all_pieces_) cudaFreeHost(b.pieces);
}

Status CudaCopyEngine::prepare(int device) {
  Result<DeviceState*> d = device_state(device);
  if (!d.ok()) return d.status();
  // Enough piece buffers for a few launches in flight, so that steady traffic allocates none.
  // Best effort: without pinned memory the small copies go one cudaMemcpyAsync each.
  while (all_pieces_.size() < 4) {
    PieceBuffer b = new_pieces(kPiecesPerLaunch);
    if (!b.pieces) break;
    free_pieces_.push_back(b);
  }
  return ok_status();
}

CudaCopyEngine::PieceBuffer CudaCopyEngine::take_pieces(size_t pieces) {
  auto best = free_pieces_.end();
  for (auto it = free_pieces_.begin(); it != free_pieces_.end(); ++it) {
    if (it->capacity >= pieces && (best == free_pieces_.end() || it->capacity < best->capacity)) best = it;
  }
  if (best != free_pieces_.end()) {
    PieceBuffer b = *best;
    *best = free_pieces_.back();
    free_pieces_.pop_back();
    return b;
  }
  return new_pieces(pieces);
}

CudaCopyEngine::PieceBuffer CudaCopyEngine::new_pieces(size_t pieces) {
  PieceBuffer b;
  b.capacity = std::bit_ceil(std::max(pieces, kPiecesPerLaunch));
  void* p = nullptr;
  // Portable: any device's kernel may read it (through unified addressing, at the same address).
  if (cudaHostAlloc(&p, b.capacity * sizeof(PageCopyPiece), cudaHostAllocPortable | cudaHostAllocMapped) != cudaSuccess) {
    cudaGetLastError();  // not sticky; clear it
    return {};
  }
  b.pieces = static_cast<PageCopyPiece*>(p);
  all_pieces_.push_back(b);
  return b;
}

Result<CudaCopyEngine::DeviceState*> CudaCopyEngine::device_state(int device) {
  auto it = devices_.find(device);
  if (it != devices_.end()) return &it->second;
  DeviceGuard guard(device);
  if (guard.status() != cudaSuccess) return cuda_status("cudaSetDevice", guard.status());
  DeviceState d;
  for (size_t i = 0; i < std::max<size_t>(1, options_.streams_per_device); ++i) {
    StreamState s;
    // Non-blocking: never wait for (or hold up) the application's work on the legacy stream.
    const cudaError_t e = cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
      for (StreamState& made : d.streams) cudaStreamDestroy(made.stream);
      return cuda_status("cudaStreamCreateWithFlags", e);
    }
    d.streams.push_back(std::move(s));
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
  (*d)->pending.push_back(r);
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

cudaError_t CudaCopyEngine::issue_small(std::span<const CopyRequest* const> small, cudaStream_t stream,
                                        std::vector<PieceBuffer>& buffers) {
  if (options_.mode == GpuCopyMode::kBatch) {
    std::vector<void*> dsts;
    std::vector<const void*> srcs;
    std::vector<size_t> sizes;
    for (const CopyRequest* r : small) {
      dsts.push_back(r->dst_ptr);
      srcs.push_back(r->src);
      sizes.push_back(r->length);
    }
    cudaMemcpyAttributes attr{};
    attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    size_t attr_index = 0;
    return cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), small.size(), &attr, &attr_index, 1, stream);
  }
  size_t pieces = 0;
  for (const CopyRequest* r : small) pieces += page_copy_pieces(r->length);
  PieceBuffer b = take_pieces(pieces);
  if (!b.pieces) {  // no pinned memory: one cudaMemcpyAsync each (slow, but the copies go)
    for (const CopyRequest* r : small) {
      const cudaError_t e = cudaMemcpyAsync(r->dst_ptr, r->src, r->length, cudaMemcpyDefault, stream);
      if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
  }
  buffers.push_back(b);
  size_t k = 0;
  for (const CopyRequest* r : small) {
    k += split_page_copy(static_cast<const uint8_t*>(r->src), static_cast<uint8_t*>(r->dst_ptr), r->length, b.pieces + k);
  }
  return launch_page_copy(b.pieces, static_cast<uint32_t>(k), stream);
}

void CudaCopyEngine::flush(int device, DeviceState& d, std::vector<CopyDone>& done) {
  // Swapped, not moved: both vectors keep their capacity, so a steady flow allocates nothing.
  d.flushing.swap(d.pending);
  d.pending.clear();
  const std::vector<CopyRequest>& pending = d.flushing;
  auto fail = [&](uint64_t op, const Status& why) {
    done.push_back({op, why});
    --inflight_;
  };
  DeviceGuard guard(device);
  if (guard.status() != cudaSuccess) {
    for (const CopyRequest& r : pending) fail(r.op, cuda_status("cudaSetDevice", guard.status()));
    return;
  }
  const size_t n = d.streams.size();
  std::vector<std::vector<uint64_t>> issued(n);
  std::vector<const CopyRequest*> small;
  for (const CopyRequest& r : pending) {
    const bool batchable = options_.mode != GpuCopyMode::kMemcpy && r.src_kind == MemoryKind::kCuda &&
                           r.dst_kind == MemoryKind::kCuda && r.length <= options_.small_copy_bytes;
    if (batchable) {
      small.push_back(&r);
      continue;
    }
    const size_t s = d.next++ % n;
    const cudaError_t e = cudaMemcpyAsync(r.dst_ptr, r.src, r.length, cudaMemcpyDefault, d.streams[s].stream);
    if (e != cudaSuccess) {
      fail(r.op, cuda_status("cudaMemcpyAsync", e));
    } else {
      issued[s].push_back(r.op);
    }
  }
  if (small.size() == 1 && options_.mode == GpuCopyMode::kAuto) {  // one copy: no batch to win
    const CopyRequest& r = *small[0];
    const size_t s = d.next++ % n;
    const cudaError_t e = cudaMemcpyAsync(r.dst_ptr, r.src, r.length, cudaMemcpyDefault, d.streams[s].stream);
    if (e != cudaSuccess) fail(r.op, cuda_status("cudaMemcpyAsync", e));
    else issued[s].push_back(r.op);
    small.clear();
  }
  // Kernel mode: one launch for the whole flush, or, past kPiecesPerLaunch pieces, launches of
  // about equal size on different streams, so that they run side by side. A copy's pieces stay
  // in one launch (its op completes with that launch's stream). Batch mode: one call.
  size_t total = 0;
  for (const CopyRequest* r : small) total += page_copy_pieces(r->length);
  const size_t per_launch = options_.mode == GpuCopyMode::kBatch ? SIZE_MAX : std::max(kPiecesPerLaunch, (total + n - 1) / n);
  std::vector<std::vector<PieceBuffer>> buffers(n);
  for (size_t i = 0; i < small.size();) {
    size_t j = i;
    size_t pieces = 0;
    while (j < small.size() && (j == i || pieces + page_copy_pieces(small[j]->length) <= per_launch)) {
      pieces += page_copy_pieces(small[j]->length);
      ++j;
    }
    const std::span<const CopyRequest* const> part(small.data() + i, j - i);
    i = j;
    const size_t s = d.next++ % n;
    const cudaError_t e = issue_small(part, d.streams[s].stream, buffers[s]);
    if (e != cudaSuccess) {
      // The launch failed: wait for the stream, so no failed op's copy can still land later.
      cudaStreamSynchronize(d.streams[s].stream);
      const char* what = options_.mode == GpuCopyMode::kBatch ? "cudaMemcpyBatchAsync" : "page-copy kernel launch";
      for (const CopyRequest* r : part) fail(r->op, cuda_status(what, e));
    } else {
      for (const CopyRequest* r : part) issued[s].push_back(r->op);
    }
  }
  for (size_t s = 0; s < n; ++s) {
    if (issued[s].empty()) {
      free_pieces_.insert(free_pieces_.end(), buffers[s].begin(), buffers[s].end());  // only failed launches used them
      continue;
    }
    cudaEvent_t ev = take_event();
    const cudaError_t e = ev ? cudaEventRecord(ev, d.streams[s].stream) : cudaErrorMemoryAllocation;
    if (e != cudaSuccess) {
      // No event to watch: wait here instead (rare), and report what the stream says.
      const cudaError_t sync = cudaStreamSynchronize(d.streams[s].stream);
      if (ev) free_events_.push_back(ev);
      free_pieces_.insert(free_pieces_.end(), buffers[s].begin(), buffers[s].end());
      for (uint64_t op : issued[s]) {
        done.push_back({op, sync == cudaSuccess ? ok_status() : cuda_status("GPU copy", sync)});
        --inflight_;
      }
      continue;
    }
    d.streams[s].flushed.push_back({ev, std::move(issued[s]), std::move(buffers[s])});
  }
}

void CudaCopyEngine::progress(std::vector<CopyDone>& done) {
  for (auto& [device, d] : devices_) {
    if (!d.pending.empty()) flush(device, d, done);
    for (StreamState& s : d.streams) {
      while (!s.flushed.empty()) {
        Flushed& f = s.flushed.front();
        const cudaError_t e = cudaEventQuery(f.event);
        if (e == cudaErrorNotReady) break;
        const Status status = e == cudaSuccess ? ok_status() : cuda_status("GPU copy (cudaEventQuery)", e);
        for (uint64_t op : f.ops) done.push_back({op, status});
        inflight_ -= f.ops.size();
        free_events_.push_back(f.event);
        free_pieces_.insert(free_pieces_.end(), f.buffers.begin(), f.buffers.end());
        s.flushed.pop_front();
      }
    }
  }
}

void CudaCopyEngine::drain() {
  for (auto& [device, d] : devices_) {
    DeviceGuard guard(device);
    inflight_ -= std::min(inflight_, d.pending.size());
    d.pending.clear();
    for (StreamState& s : d.streams) {
      if (!s.flushed.empty()) cudaStreamSynchronize(s.stream);
      for (Flushed& f : s.flushed) {
        inflight_ -= std::min(inflight_, f.ops.size());
        free_events_.push_back(f.event);
        free_pieces_.insert(free_pieces_.end(), f.buffers.begin(), f.buffers.end());
      }
      s.flushed.clear();
    }
  }
}

}  // namespace fabric_lib::gpu

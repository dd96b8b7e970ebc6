#include "gpu/cuda_copy_engine.h"

#include <algorithm>
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

cudaError_t CudaCopyEngine::issue_small(std::span<const CopyRequest* const> small, cudaStream_t stream) {
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
  PageCopyBatch batch{};
  for (size_t i = 0; i < small.size(); i += PageCopyBatch::kMaxPageCopies) {
    batch.count = 0;
    for (size_t k = i; k < small.size() && batch.count < PageCopyBatch::kMaxPageCopies; ++k) {
      batch.src[batch.count] = static_cast<const uint8_t*>(small[k]->src);
      batch.dst[batch.count] = static_cast<uint8_t*>(small[k]->dst_ptr);
      batch.length[batch.count] = small[k]->length;
      ++batch.count;
    }
    plan_page_copy_blocks(batch);
    const cudaError_t e = launch_page_copy(batch, stream);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

void CudaCopyEngine::flush(int device, DeviceState& d, std::vector<CopyDone>& done) {
  std::vector<CopyRequest> pending = std::move(d.pending);
  d.pending.clear();
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
  // Kernel mode: one launch per kMaxPageCopies copies, the launches spread over the streams so
  // that a large flush (the ipc domain posts up to a thousand pages a pass) runs them side by
  // side instead of one after another. Batch mode: one call for the whole flush.
  const size_t chunk = options_.mode == GpuCopyMode::kBatch ? std::max<size_t>(1, small.size()) : PageCopyBatch::kMaxPageCopies;
  for (size_t i = 0; i < small.size(); i += chunk) {
    const std::span<const CopyRequest* const> part(small.data() + i, std::min(chunk, small.size() - i));
    const size_t s = d.next++ % n;
    const cudaError_t e = issue_small(part, d.streams[s].stream);
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
    if (issued[s].empty()) continue;
    cudaEvent_t ev = take_event();
    const cudaError_t e = ev ? cudaEventRecord(ev, d.streams[s].stream) : cudaErrorMemoryAllocation;
    if (e != cudaSuccess) {
      // No event to watch: wait here instead (rare), and report what the stream says.
      const cudaError_t sync = cudaStreamSynchronize(d.streams[s].stream);
      if (ev) free_events_.push_back(ev);
      for (uint64_t op : issued[s]) {
        done.push_back({op, sync == cudaSuccess ? ok_status() : cuda_status("GPU copy", sync)});
        --inflight_;
      }
      continue;
    }
    d.streams[s].flushed.push_back({ev, std::move(issued[s])});
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
      }
      s.flushed.clear();
    }
  }
}

}  // namespace fabric_lib::gpu

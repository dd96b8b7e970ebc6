// How the copy engine turns the copies submitted since the last progress() into stream
// operations (cuda_copy_engine.h, "flush"): plain copies merged and spread over the streams,
// small GPU-to-GPU copies cut into page-copy kernel launches (or one batched call), each stream's
// share ended by its completion word or event and handed to the launcher or issued here.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "base/cpu_relax.h"
#include "gpu/cuda_copy_engine.h"
#include "gpu/cuda_status.h"
#include "gpu/page_copy_kernel.h"

namespace fabric_lib::gpu {
namespace {

// Calls f(src, dst) for each copy of `r` (a segment, a page pair, or the plain copy); stops at
// the first error.
template <typename F>
cudaError_t for_each_segment(const CopyRequest& r, F&& f) {
  const auto* src = static_cast<const uint8_t*>(r.src);
  auto* dst = static_cast<uint8_t*>(r.dst_ptr);
  const uint64_t n = segment_count(r);
  for (uint64_t i = 0; i < n; ++i) {
    const CopySegment s = copy_offsets(r, i);
    const cudaError_t e = f(src + s.src_offset, dst + s.dst_offset);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

// Kernel pieces of a request at pieces of 1 << shift bytes: each segment's (or the plain copy's).
size_t pieces_of(const CopyRequest& r, uint32_t shift) { return page_copy_pieces(r.length, shift) * segment_count(r); }

// Whether `r`, after `prev` (null: the first) in a launch, needs a kernel run of its own: a gather
// always (its bases and offsets), a plain copy unless it follows a plain copy of the same length
// (plain copies share a run with null bases, their addresses as offsets).
bool opens_run(const CopyRequest* prev, const CopyRequest& r) {
  return prev == nullptr || is_gather(r) || is_gather(*prev) || prev->length != r.length;
}

}  // namespace

bool CudaCopyEngine::is_small(const CopyRequest& r) const {
  return options_.mode != GpuCopyMode::kMemcpy && r.src_kind == MemoryKind::kCuda && r.dst_kind == MemoryKind::kCuda &&
         r.length <= std::min<uint64_t>(options_.small_copy_bytes, UINT32_MAX);  // a kernel run's length is 32 bits
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

cudaError_t CudaCopyEngine::add_small(int device, std::span<const Queued* const> small, uint32_t piece_shift,
                                      size_t pieces, StreamState& st) {
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
  size_t copies = 0;
  for (const Queued* q : small) {
    if (!q->pinned) copies += segment_count(q->request);
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
  op.launch_index = st.issuing_launches.add();
  PageCopyLaunch& launch = st.issuing_launches.slots[op.launch_index];
  launch.run_count = 0;
  launch.warps = 0;
  launch.piece_shift = piece_shift;
  launch.loads_per_lane = options_.loads_per_lane;
  size_t k = 0;
  const CopyRequest* prev = nullptr;
  for (const Queued* q : small) {
    const CopyRequest& r = q->request;
    if (opens_run(prev, r)) {
      if (launch.run_count == kMaxPageCopyRuns) {  // flush() prevents it
        st.ops.pop_back();
        --st.issuing_launches.used;
        return cudaErrorInvalidValue;
      }
      // A gather by pages is pinned (submit() turned the others into segments).
      const bool gather = is_gather(r);
      PageCopyRun& run = launch.runs[launch.run_count++];
      run = {};
      run.src = gather ? static_cast<const uint8_t*>(r.src) : nullptr;
      run.dst = gather ? static_cast<uint8_t*>(r.dst_ptr) : nullptr;
      run.length = static_cast<uint32_t>(r.length);  // <= small_copy_bytes (is_small)
      run.first_warp = launch.warps;
      if (!r.pages.empty()) {
        run.pages = reinterpret_cast<const PageCopyPair*>(r.pages.data());
        run.src_stride = r.src_stride;
        run.dst_stride = r.dst_stride;
        run.by_pages = 1;
      } else {
        run.segments = q->pinned ? reinterpret_cast<const PageCopySegment*>(r.segments.data()) : b.segments + k;
      }
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
    launch.warps += static_cast<uint32_t>(pieces_of(r, piece_shift));
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
  std::swap(f.launches, st.issuing_launches);  // st's is a retired flush's: used 0
  st.flushed.push_back(std::move(f));
  st.flushed.back().launches.bind(st.ops);  // where they stay until the flush is retired
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
    if (!is_gather(r)) {
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
  if (small.size() == 1 && !is_gather(small[0]->request) && options_.mode == GpuCopyMode::kAuto) {
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
  // Pieces of 16 KiB, or smaller ones where the flush would otherwise launch fewer warps than
  // options_.min_launch_warps.
  auto pieces_at = [&](uint32_t shift) {
    size_t n = 0;
    for (const Queued* q : small) n += pieces_of(q->request, shift);
    return n;
  };
  uint32_t piece_shift = kPageCopyPieceShift;
  size_t total = pieces_at(piece_shift);
  while (piece_shift > kPageCopyMinPieceShift && total < options_.min_launch_warps) total = pieces_at(--piece_shift);
  const size_t per_launch = options_.mode == GpuCopyMode::kBatch ? SIZE_MAX : std::max(kPiecesPerLaunch, (total + n - 1) / n);
  const size_t max_runs = options_.mode == GpuCopyMode::kBatch ? SIZE_MAX : kMaxPageCopyRuns;
  for (size_t i = 0; i < small.size();) {
    size_t j = i;
    size_t pieces = 0, runs = 0;
    while (j < small.size()) {
      const size_t more_runs = runs + (opens_run(j == i ? nullptr : &small[j - 1]->request, small[j]->request) ? 1 : 0);
      const size_t more = pieces_of(small[j]->request, piece_shift);
      if (j > i && (pieces + more > per_launch || more_runs > max_runs)) break;
      pieces += more;
      runs = more_runs;
      ++j;
    }
    const std::span<const Queued* const> part(small.data() + i, j - i);
    i = j;
    const size_t s = d.next++ % n;
    const cudaError_t e = add_small(device, part, piece_shift, pieces, d.streams[s]);
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
  // Counted in copies (a gather's segments), not kernel pieces: what the launcher takes off this
  // thread grows with the pages a flush holds, not with their bytes (docs/gpu.md's A/B).
  size_t copies = 0;
  for (const Queued& q : d.flushing) copies += segment_count(q.request);
  const bool hand_over = launcher_->threaded() && (copies >= options_.launcher_copies || !launcher_->idle());
  for (size_t s = 0; s < n; ++s) {
    StreamState& st = d.streams[s];
    if (st.issuing.empty()) {
      // Only failed launches used these buffers (and queued no ops).
      for (const SegmentBuffer& b : st.issuing_buffers) segments_.release(b);
      st.issuing_buffers.clear();
      st.issuing_launches.used = 0;
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
      st.issuing_launches.bind(st.ops);
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
      st.issuing_launches.used = 0;
      retire(f, error == 0 ? ok_status() : cuda_status("GPU copy", static_cast<cudaError_t>(error)), &done);
    }
  }
}

}  // namespace fabric_lib::gpu

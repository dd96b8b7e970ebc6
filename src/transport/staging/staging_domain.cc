#include "transport/staging/staging_domain.h"

#include <algorithm>

#include "base/log.h"

namespace fabric_lib::transport::staging {

using transport::DomainMr;
using transport::Event;
using transport::EventKind;
using transport::PeerHandle;
using transport::PostResult;
using transport::WriteWr;

StagingDomain::StagingDomain(std::unique_ptr<transport::Domain> inner, StagingGpuFactory gpu, Options options)
    : inner_(std::move(inner)), gpu_factory_(std::move(gpu)), options_(options) {}

StagingDomain::~StagingDomain() {
  // Close the endpoint first: the provider may still read bounce buffers for WRs in flight.
  inner_.reset();
  if (gpu_) {
    gpu_->copies().drain();  // copies still landing in bounce buffers
    if (bounce_) gpu_->free_pinned(bounce_);
  }
}

Status StagingDomain::ensure_staging() {
  if (bounce_) return ok_status();
  if (options_.chunk_bytes == 0 || options_.buffers == 0) return invalid_argument("staging needs chunk_bytes and buffers > 0");
  if (!gpu_) {
    if (!gpu_factory_) return unsupported("GPU memory staging is not available in this build");
    Result<std::unique_ptr<StagingGpu>> made = gpu_factory_();
    if (!made.ok()) return Status(made.status().code(), "GPU memory staging: " + made.status().message());
    gpu_ = std::move(made).value();
  }
  const size_t bytes = options_.chunk_bytes * options_.buffers;
  Result<void*> host = gpu_->alloc_pinned(bytes);
  if (!host.ok()) return host.status();
  Result<DomainMr> mr = inner_->register_memory(*host, bytes, Access::kLocalOnly, MemoryKind::kHost);
  if (!mr.ok()) {
    gpu_->free_pinned(*host);
    return Status(mr.status().code(), "registering bounce buffers: " + mr.status().message());
  }
  bounce_ = static_cast<uint8_t*>(*host);
  bounce_mr_ = *mr;
  chunks_.assign(options_.buffers, Chunk{});
  free_.clear();
  for (size_t i = options_.buffers; i-- > 0;) free_.push_back(static_cast<uint32_t>(i));
  FL_LOG_DEBUG("staging GPU sources on {} through {} bounce buffers of {} bytes", inner_->info().provider,
               options_.buffers, options_.chunk_bytes);
  return ok_status();
}

Result<DomainMr> StagingDomain::register_memory(void* ptr, size_t length, Access access, MemoryKind kind) {
  if (kind != MemoryKind::kCuda) return inner_->register_memory(ptr, length, access, kind);
  const std::string& provider = inner_->info().provider;
  if (inner_->info().hmem && !hmem_refused_) {
    Result<DomainMr> direct = inner_->register_memory(ptr, length, access, kind);
    if (direct.ok() || direct.status().code() != ErrorCode::kUnsupported) return direct;
    // Claimed FI_HMEM, but cannot register CUDA memory (e.g. a libfabric built without CUDA).
    hmem_refused_ = true;
    hmem_reason_ = direct.status().message();
    FL_LOG_INFO("provider {} cannot register GPU memory ({}); GPU sources are staged through host memory", provider,
                hmem_reason_);
  }
  if (has_access(access, Access::kRemoteWrite) || has_access(access, Access::kRemoteRead)) {
    const std::string why = hmem_reason_.empty() ? "it does not report FI_HMEM" : hmem_reason_;
    return unsupported("GPU memory cannot be a remote target on provider " + provider + " (" + why +
                       "). Receive into GPU memory through an HMEM-capable provider (efa, or verbs;ofi_rxm with a "
                       "CUDA-enabled libfabric) or through the same-host IPC backend (provider \"ipc\": GPUs of one host); register GPU "
                       "memory Access::kLocalOnly to write from it here (staged through pinned host buffers)");
  }
  FABRIC_LIB_RETURN_IF_ERROR(ensure_staging());
  Result<int> device = gpu_->device_of(ptr);
  if (!device.ok()) return device.status();
  auto region = std::make_unique<StagedRegion>();
  region->id = kStagedIdBit | next_region_id_++;
  region->device = *device;
  DomainMr mr;
  mr.id = region->id;
  mr.desc = region.get();  // how post_write recognises the region
  regions_.push_back(std::move(region));
  return mr;
}

void StagingDomain::unregister_memory(uint64_t mr_id) {
  if (!(mr_id & kStagedIdBit)) {
    inner_->unregister_memory(mr_id);
    return;
  }
  // The engine unregisters only after every request using the region completed.
  std::erase_if(regions_, [&](const std::unique_ptr<StagedRegion>& r) { return r->id == mr_id; });
}

const StagingDomain::StagedRegion* StagingDomain::find_region(const void* desc) const {
  for (const auto& r : regions_) {
    if (r.get() == desc) return r.get();
  }
  return nullptr;
}

bool StagingDomain::is_chunk_context(uint64_t context) const {
  if (chunks_.empty()) return false;
  const auto base = reinterpret_cast<uint64_t>(chunks_.data());
  const uint64_t end = base + chunks_.size() * sizeof(Chunk);
  return context >= base && context < end && (context - base) % sizeof(Chunk) == 0;
}

PostResult StagingDomain::post_write(const WriteWr& wr, Status* error) {
  const StagedRegion* region = (wr.length == 0 || regions_.empty()) ? nullptr : find_region(wr.src_desc);
  if (!region) return inner_->post_write(wr, error);
  // Bounded pool: accept only with a buffer to start on, and after older writes got theirs.
  if (free_.empty() || !waiting_.empty()) return PostResult::kAgain;
  StagedWrite& w = writes_.emplace_back();
  w.self = std::prev(writes_.end());
  w.wr = wr;
  w.device = region->device;
  w.chunks = static_cast<uint32_t>((wr.length + options_.chunk_bytes - 1) / options_.chunk_bytes);
  if (wr.has_imm && w.chunks > 1 && !inner_->info().delivery_complete && !warned_transmit_complete_) {
    warned_transmit_complete_ = true;
    FL_LOG_WARN("provider {} does not grant delivery-complete writes: a staged write's imm follows its other chunks' "
                "local completions, which then do not prove delivery",
                inner_->info().provider);
  }
  waiting_.push_back(&w);
  pump();
  return PostResult::kPosted;
}

bool StagingDomain::start_chunk(StagedWrite* w) {
  const uint32_t b = free_.back();
  free_.pop_back();
  Chunk& c = chunks_[b];
  c.write = w;
  c.index = w->next_chunk++;
  c.offset = static_cast<uint64_t>(c.index) * options_.chunk_bytes;
  c.length = std::min(options_.chunk_bytes, w->wr.length - c.offset);
  c.with_imm = w->wr.has_imm && c.index + 1 == w->chunks;
  gpu::CopyRequest copy;
  copy.op = b;
  copy.src = static_cast<const uint8_t*>(w->wr.src) + c.offset;
  copy.src_kind = MemoryKind::kCuda;
  copy.src_device = w->device;
  copy.length = c.length;
  copy.dst_ptr = buffer(c);
  copy.dst_kind = MemoryKind::kHost;
  copy.dst_device = w->device;
  Status error;
  switch (gpu_->copies().submit(copy, &error)) {
    case gpu::CopySubmit::kAccepted:
      ++copying_;
      return true;
    case gpu::CopySubmit::kAgain:  // the buffer goes back; this chunk starts at a later pump
      c.write = nullptr;
      --w->next_chunk;
      free_.push_back(b);
      return false;
    case gpu::CopySubmit::kFailed:
      fail(w, std::move(error));
      release_chunk(&c);
      return true;
  }
  return true;
}

void StagingDomain::pump() {
  // 1. Free buffers go to the oldest waiting write; its copies start in chunk order.
  while (!waiting_.empty()) {
    StagedWrite* w = waiting_.front();
    if (w->failed) {
      waiting_.pop_front();  // before anything may complete (and free) it
      drop_unstarted(w);
      continue;
    }
    if (free_.empty()) break;
    const bool last = w->next_chunk + 1 == w->chunks;
    if (!start_chunk(w)) break;  // the copy engine is full
    if (last) waiting_.pop_front();
  }
  // 2. Finished copies.
  if (copying_ > 0) {
    copied_.clear();
    gpu_->copies().progress(copied_);
    for (gpu::CopyDone& done : copied_) {
      --copying_;
      Chunk* c = &chunks_[done.op];
      if (done.status.ok()) {
        on_copied(c);
      } else {
        fail(c->write, std::move(done.status));
        release_chunk(c);
      }
    }
  }
  // 3. Chunks whose bytes are in their bounce buffer go to the inner domain, in order.
  while (!ready_.empty()) {
    Chunk* c = ready_.front();
    StagedWrite* w = c->write;
    if (w->failed) {  // never post for a failed write (its peer handle may be gone)
      ready_.pop_front();
      release_chunk(c);
      continue;
    }
    WriteWr inner;
    inner.src = buffer(*c);
    inner.length = c->length;
    inner.src_desc = bounce_mr_.desc;
    inner.peer = w->wr.peer;
    inner.remote_addr = w->wr.remote_addr + c->offset;
    inner.rkey = w->wr.rkey;
    inner.has_imm = c->with_imm;
    inner.imm_count = w->wr.imm_count;  // the imm's arrivals, on the chunk that carries it
    inner.imm = w->wr.imm;
    inner.context = reinterpret_cast<uint64_t>(c);
    Status error;
    const PostResult r = inner_->post_write(inner, &error);
    if (r == PostResult::kAgain) break;
    ready_.pop_front();
    if (r == PostResult::kFailed) {
      fail(w, std::move(error));
      release_chunk(c);
    }
  }
}

void StagingDomain::on_copied(Chunk* c) {
  StagedWrite* w = c->write;
  if (w->failed) {
    release_chunk(c);
    return;
  }
  if (c->with_imm && w->chunks > 1) {
    w->held_imm = c;  // posted once its siblings completed
    check_write(w);
    return;
  }
  ready_.push_back(c);
}

void StagingDomain::fail(StagedWrite* w, Status why) {
  if (w->failed) return;
  w->failed = true;
  w->error = std::move(why);
}

void StagingDomain::release_chunk(Chunk* c) {
  StagedWrite* w = c->write;
  c->write = nullptr;
  free_.push_back(static_cast<uint32_t>(c - chunks_.data()));
  ++w->finished;
  check_write(w);
}

void StagingDomain::drop_unstarted(StagedWrite* w) {
  w->finished += w->chunks - w->next_chunk;
  w->next_chunk = w->chunks;
  check_write(w);
}

void StagingDomain::check_write(StagedWrite* w) {
  if (w->held_imm && (w->failed || w->finished + 1 == w->chunks)) {
    Chunk* held = std::exchange(w->held_imm, nullptr);
    if (w->failed) {
      release_chunk(held);  // re-enters check_write, which may complete w
    } else {
      ready_.push_back(held);
    }
    return;
  }
  if (w->finished < w->chunks) return;
  Event ev;
  ev.kind = EventKind::kWriteDone;
  ev.context = w->wr.context;
  ev.length = w->wr.length;
  ev.status = w->failed ? w->error : ok_status();
  finished_.push_back(std::move(ev));
  writes_.erase(w->self);
}

void StagingDomain::remove_peer(PeerHandle peer) {
  std::vector<StagedWrite*> victims;
  for (StagedWrite& w : writes_) {
    if (w.wr.peer != peer) continue;
    fail(&w, Status(ErrorCode::kPeerUnreachable, "peer removed before the staged write finished"));
    victims.push_back(&w);
  }
  // Unstarted writes leave the queue now (only the front one can be partly started).
  std::erase_if(waiting_, [](StagedWrite* w) { return w->failed && w->next_chunk == 0; });
  for (StagedWrite* w : victims) {
    if (w->next_chunk == 0) {
      drop_unstarted(w);
    } else {
      check_write(w);  // a held imm chunk goes back; chunks in flight still complete normally
    }
  }
  inner_->remove_peer(peer);
  pump();
}

size_t StagingDomain::poll(std::vector<Event>& out, size_t max) {
  // Nothing staged in flight (no staged registration yet, or every bounce buffer free and no
  // write of ours pending): the inner domain's events pass straight through, unexamined and
  // uncopied — the decorator costs a host-memory write nothing.
  if (writes_.empty() && finished_.empty() && free_.size() == chunks_.size()) return inner_->poll(out, max);
  const size_t before = out.size();
  auto drain_finished = [&] {
    size_t n = std::min(finished_.size(), max - (out.size() - before));
    for (size_t i = 0; i < n; ++i) out.push_back(std::move(finished_[i]));
    finished_.erase(finished_.begin(), finished_.begin() + static_cast<std::ptrdiff_t>(n));
  };
  if (!writes_.empty()) pump();
  drain_finished();
  if (out.size() - before < max) {
    scratch_.clear();
    inner_->poll(scratch_, max - (out.size() - before));
    for (Event& ev : scratch_) {
      if (ev.kind == EventKind::kWriteDone && is_chunk_context(ev.context)) {
        Chunk* c = reinterpret_cast<Chunk*>(ev.context);
        if (!ev.status.ok()) fail(c->write, std::move(ev.status));
        release_chunk(c);
        continue;
      }
      out.push_back(std::move(ev));
    }
    if (!writes_.empty()) pump();  // freed buffers start the next copies at once
    drain_finished();
  }
  return out.size() - before;
}

bool StagingDomain::has_deferred_work() const {
  return !waiting_.empty() || copying_ > 0 || !ready_.empty() || !finished_.empty() || inner_->has_deferred_work();
}

}  // namespace fabric_lib::transport::staging

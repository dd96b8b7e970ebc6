#include "transport/ipc/host_copy_engine.h"

#include <sys/prctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>

#include "base/log.h"

namespace fabric_lib::transport::ipc {
namespace {

// process_vm_writev's errno as a Status: what the caller (the ipc domain) should make of it.
Status vm_write_error(uint32_t pid, int err) {
  const std::string what = "process_vm_writev into process " + std::to_string(pid) + ": " + std::strerror(err);
  switch (err) {
    case ESRCH:
      return Status(ErrorCode::kPeerUnreachable, what + " (the peer process has exited)");
    case EPERM:
      return unsupported(what + " (ipc host-memory writes need permission to ptrace the peer: the same user "
                                "and kernel.yama.ptrace_scope=0, or CAP_SYS_PTRACE)");
    case EFAULT:
      return Status(ErrorCode::kProviderError, what + " (the target range is not mapped in the peer: freed memory?)");
    default:
      return Status(ErrorCode::kProviderError, what);
  }
}

}  // namespace

void allow_host_writes_from_peers() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::ifstream in("/proc/sys/kernel/yama/ptrace_scope");
    int scope = 0;
    if (!(in >> scope) || scope != 1) return;
    if (prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0) == 0) {
      FL_LOG_INFO("ipc: ptrace_scope is 1; allowed same-user peers to write into this process's registered host memory");
    } else {
      FL_LOG_WARN("ipc: prctl(PR_SET_PTRACER) failed: {}; peers may not be able to write into this process", std::strerror(errno));
    }
  });
}

HostCopyEngine::HostCopyEngine(Options options)
    : options_(options), self_pid_(static_cast<uint32_t>(getpid())) {
  options_.slice_bytes = std::max<uint64_t>(options_.slice_bytes, 4096);
  options_.budget_bytes = std::max(options_.budget_bytes, options_.slice_bytes);
}

gpu::CopySubmit HostCopyEngine::submit(const gpu::CopyRequest& r, Status* error) {
  const bool gpu_source = r.src_kind == MemoryKind::kCuda;
  if (r.src_kind != MemoryKind::kHost && !gpu_source) {
    if (error) *error = invalid_argument("ipc host copy from an unknown memory kind");
    return gpu::CopySubmit::kFailed;
  }
  if (gpu_source && !read_device_) {
    if (error) *error = unsupported("ipc: a GPU source into a peer's host memory needs the CUDA backend");
    return gpu::CopySubmit::kFailed;
  }
  if (r.dst_pid == 0 || r.dst_addr == 0 || (r.length > 0 && r.src == nullptr)) {
    if (error) *error = invalid_argument("ipc host copy without a source or target");
    return gpu::CopySubmit::kFailed;
  }
  if (count_ >= options_.max_jobs) return gpu::CopySubmit::kAgain;
  if (count_ == ring_.size()) grow();
  Job& job = slot(count_);
  job.op = r.op;
  job.pid = r.dst_pid;
  job.dst = r.dst_addr;
  job.src = static_cast<const uint8_t*>(r.src);
  job.length = r.length;
  job.src_device = gpu_source ? std::max(r.src_device, 0) : -1;
  if (!r.segments.empty()) {
    job.segments.assign(r.segments.begin(), r.segments.end());  // the span ends with this call
  } else {
    // A plain copy is one segment at offset 0; page pairs become their offsets here, as the
    // iovecs need them.
    job.segments.resize(gpu::segment_count(r));
    for (size_t i = 0; i < job.segments.size(); ++i) job.segments[i] = gpu::copy_offsets(r, i);
  }
  job.seg = r.length == 0 ? job.segments.size() : 0;  // nothing to copy: done at its first turn
  job.copied = 0;
  ++count_;
  return gpu::CopySubmit::kAccepted;
}

void HostCopyEngine::grow() {
  // Power-of-two sizes; the jobs keep their order, and every slot its segments' capacity.
  std::vector<Job> bigger(std::max<size_t>(16, ring_.size() * 2));
  for (size_t i = 0; i < ring_.size(); ++i) std::swap(bigger[i], slot(i));
  ring_.swap(bigger);
  head_ = 0;
}

void HostCopyEngine::pop_front() {
  head_ = (head_ + 1) & (ring_.size() - 1);
  --count_;
}

void HostCopyEngine::rotate() {
  // The slot after the last job is free (or is the front itself when the ring is full).
  Job& tail = slot(count_);
  if (&tail != &ring_[head_]) std::swap(tail, ring_[head_]);
  head_ = (head_ + 1) & (ring_.size() - 1);
}

void HostCopyEngine::advance(Job& job, uint64_t n) {
  while (n > 0 && job.seg < job.segments.size()) {
    const uint64_t take = std::min(n, job.length - job.copied);
    job.copied += take;
    n -= take;
    if (job.copied == job.length) {
      ++job.seg;
      job.copied = 0;
    }
  }
}

Status HostCopyEngine::copy_some(Job& job, uint64_t bytes, uint64_t* moved) {
  if (job.src_device >= 0) return copy_from_device(job, bytes, moved);
  if (job.pid == self_pid_) return copy_local(job, bytes, moved);
  return copy_remote(job, bytes, moved);
}

Status HostCopyEngine::copy_local(Job& job, uint64_t bytes, uint64_t* moved) {
  while (*moved < bytes && job.seg < job.segments.size()) {
    const gpu::CopySegment& s = job.segments[job.seg];
    const uint64_t n = std::min(bytes - *moved, job.length - job.copied);
    std::memcpy(reinterpret_cast<void*>(job.dst + s.dst_offset + job.copied), job.src + s.src_offset + job.copied, n);
    advance(job, n);
    *moved += n;
  }
  return ok_status();
}

Status HostCopyEngine::copy_remote(Job& job, uint64_t bytes, uint64_t* moved) {
  if (local_iov_.empty()) {
    local_iov_.resize(kMaxIov);
    remote_iov_.resize(kMaxIov);
  }
  while (*moved < bytes && job.seg < job.segments.size()) {
    // Pairs of equal length: the kernel walks both lists in step.
    size_t count = 0;
    uint64_t want = 0;
    uint64_t at = job.copied;
    for (size_t k = job.seg; k < job.segments.size() && count < kMaxIov && *moved + want < bytes; ++k, at = 0) {
      const gpu::CopySegment& s = job.segments[k];
      const uint64_t n = std::min(job.length - at, bytes - *moved - want);
      local_iov_[count] = {const_cast<uint8_t*>(job.src + s.src_offset + at), n};
      remote_iov_[count] = {reinterpret_cast<void*>(job.dst + s.dst_offset + at), n};
      want += n;
      ++count;
    }
    const ssize_t n = process_vm_writev(static_cast<pid_t>(job.pid), local_iov_.data(), count, remote_iov_.data(), count, 0);
    if (n > 0) {  // possibly short: the next call goes on from there
      advance(job, static_cast<uint64_t>(n));
      *moved += static_cast<uint64_t>(n);
      continue;
    }
    const int err = n == 0 ? EFAULT : errno;
    if (err == EINTR) continue;
    return vm_write_error(job.pid, err);
  }
  return ok_status();
}

Status HostCopyEngine::copy_from_device(Job& job, uint64_t bytes, uint64_t* moved) {
  while (*moved < bytes && job.seg < job.segments.size()) {
    const gpu::CopySegment& s = job.segments[job.seg];
    const uint64_t n = std::min(bytes - *moved, job.length - job.copied);
    const uint8_t* src = job.src + s.src_offset + job.copied;
    const uint64_t dst = job.dst + s.dst_offset + job.copied;
    if (job.pid == self_pid_) {  // straight into the target: it is in this process
      FABRIC_LIB_RETURN_IF_ERROR(read_device_(reinterpret_cast<void*>(dst), src, n, job.src_device));
    } else {
      if (bounce_.empty()) bounce_.resize(std::max<uint64_t>(options_.bounce_bytes, 4096));
      for (uint64_t done = 0; done < n;) {
        const uint64_t step = std::min<uint64_t>(n - done, bounce_.size());
        FABRIC_LIB_RETURN_IF_ERROR(read_device_(bounce_.data(), src + done, step, job.src_device));
        FABRIC_LIB_RETURN_IF_ERROR(write_into(job.pid, dst + done, bounce_.data(), step));
        done += step;
      }
    }
    advance(job, n);
    *moved += n;
  }
  return ok_status();
}

Status HostCopyEngine::write_into(uint32_t pid, uint64_t dst, const uint8_t* src, uint64_t length) {
  uint64_t done = 0;
  while (done < length) {
    iovec local{const_cast<uint8_t*>(src + done), length - done};
    iovec remote{reinterpret_cast<void*>(dst + done), length - done};
    const ssize_t n = process_vm_writev(static_cast<pid_t>(pid), &local, 1, &remote, 1, 0);
    if (n > 0) {
      done += static_cast<uint64_t>(n);
      continue;
    }
    const int err = n == 0 ? EFAULT : errno;
    if (err == EINTR) continue;
    return vm_write_error(pid, err);
  }
  return ok_status();
}

void HostCopyEngine::progress(std::vector<gpu::CopyDone>& done) {
  uint64_t budget = options_.budget_bytes;
  // One slice per job in turn: small copies finish on their first turn, large ones take several.
  size_t turns = count_;
  while (turns-- > 0 && budget > 0 && count_ > 0) {
    Job& job = ring_[head_];
    uint64_t moved = 0;
    Status s = copy_some(job, std::min(options_.slice_bytes, budget), &moved);
    budget -= std::min(budget, std::max<uint64_t>(moved, 1));
    if (!s.ok()) {
      done.push_back({job.op, std::move(s)});
      pop_front();
    } else if (job.seg == job.segments.size()) {
      done.push_back({job.op, ok_status()});
      pop_front();
    } else {
      rotate();
    }
  }
}

}  // namespace fabric_lib::transport::ipc

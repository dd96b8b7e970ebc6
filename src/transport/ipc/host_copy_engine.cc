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
  if (jobs_.size() >= options_.max_jobs) return gpu::CopySubmit::kAgain;
  jobs_.push_back({r.op, r.dst_pid, r.dst_addr, static_cast<const uint8_t*>(r.src), r.length, 0,
                   gpu_source ? std::max(r.src_device, 0) : -1});
  return gpu::CopySubmit::kAccepted;
}

Status HostCopyEngine::copy_some(Job& job, uint64_t bytes) {
  const uint64_t end = std::min(job.length, job.copied + bytes);
  if (job.src_device >= 0) {
    if (job.pid == self_pid_) {  // straight into the target: it is in this process
      FABRIC_LIB_RETURN_IF_ERROR(read_device_(reinterpret_cast<void*>(job.dst + job.copied), job.src + job.copied,
                                              end - job.copied, job.src_device));
      job.copied = end;
      return ok_status();
    }
    if (bounce_.empty()) bounce_.resize(std::max<uint64_t>(options_.bounce_bytes, 4096));
    while (job.copied < end) {
      const uint64_t n = std::min<uint64_t>(end - job.copied, bounce_.size());
      FABRIC_LIB_RETURN_IF_ERROR(read_device_(bounce_.data(), job.src + job.copied, n, job.src_device));
      FABRIC_LIB_RETURN_IF_ERROR(write_into(job.pid, job.dst + job.copied, bounce_.data(), n));
      job.copied += n;
    }
    return ok_status();
  }
  if (job.pid == self_pid_) {
    std::memcpy(reinterpret_cast<void*>(job.dst + job.copied), job.src + job.copied, end - job.copied);
    job.copied = end;
    return ok_status();
  }
  FABRIC_LIB_RETURN_IF_ERROR(write_into(job.pid, job.dst + job.copied, job.src + job.copied, end - job.copied));
  job.copied = end;
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
  return ok_status();
}

void HostCopyEngine::progress(std::vector<gpu::CopyDone>& done) {
  uint64_t budget = options_.budget_bytes;
  // One slice per job in turn: small copies finish on their first turn, large ones take several.
  size_t turns = jobs_.size();
  while (turns-- > 0 && budget > 0 && !jobs_.empty()) {
    Job job = jobs_.front();
    jobs_.pop_front();
    const uint64_t slice = std::min(options_.slice_bytes, budget);
    const uint64_t before = job.copied;
    Status s = copy_some(job, slice);
    budget -= std::min(budget, std::max<uint64_t>(job.copied - before, 1));
    if (!s.ok()) {
      done.push_back({job.op, std::move(s)});
    } else if (job.copied == job.length) {
      done.push_back({job.op, ok_status()});
    } else {
      jobs_.push_back(job);
    }
  }
}

}  // namespace fabric_lib::transport::ipc

// How the copy engine's stream operations are issued: on its launcher thread (op_launcher.h) or
// inline on the engine's thread, in order per flush; what a failed one leaves behind (the
// stream waited for, the flush's failure published, its word moved when the copies landed).
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <cassert>
#include <optional>

#include "base/log.h"
#include "gpu/cuda_copy_engine.h"

namespace fabric_lib::gpu {

std::function<void()> CudaCopyEngine::launcher_start() {
  // A new thread inherits its creator's CPUs. The engine is made on a group worker, which may be
  // pinned to one CPU: the launcher then runs on the process's CPUs less that one.
  cpu_set_t mine;
  CPU_ZERO(&mine);
  std::optional<cpu_set_t> cpus;
  if (pthread_getaffinity_np(pthread_self(), sizeof mine, &mine) == 0 && CPU_COUNT(&mine) == 1) {
    cpu_set_t process;
    CPU_ZERO(&process);
    if (sched_getaffinity(getpid(), sizeof process, &process) == 0) {  // the main thread's CPUs
      for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
        if (CPU_ISSET(cpu, &mine)) CPU_CLR(cpu, &process);
      }
      if (CPU_COUNT(&process) > 0) cpus = process;
    }
  }
  return [cpus] {
    pthread_setname_np(pthread_self(), "fl-launcher");
    if (cpus) pthread_setaffinity_np(pthread_self(), sizeof *cpus, &*cpus);
  };
}

int CudaCopyEngine::Issuer::issue(const StreamOp& op, bool on_launcher) {
  if (on_launcher && op.device != device) {
    const cudaError_t e = cudaSetDevice(op.device);
    if (e != cudaSuccess) return e;
    device = op.device;
  }
  cudaStream_t stream = op.stream->stream;
  int code = 0;
  switch (op.kind) {
    case StreamOp::Kind::kCopy:
      code = cudaMemcpyAsync(op.dst, op.src, op.bytes, cudaMemcpyDefault, stream);
      break;
    case StreamOp::Kind::kLaunch:
      code = launch_page_copy(*op.launch, stream);
      break;
    case StreamOp::Kind::kBatch: {  // kBatch mode: never on the launcher (the arrays are the engine's)
      assert(!on_launcher);
      cudaMemcpyAttributes attr{};
      attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
      size_t attr_index = 0;
      code = cudaMemcpyBatchAsync(engine->batch_dsts_.data(), engine->batch_srcs_.data(), engine->batch_sizes_.data(),
                                  engine->batch_dsts_.size(), &attr, &attr_index, 1, stream);
      break;
    }
    case StreamOp::Kind::kWord: {
      // Default flags: the write waits for the stream's earlier work and follows a system-wide
      // fence, so the flush's bytes are visible wherever they went before the word moves.
      const CUresult r = engine->write_word_(stream, reinterpret_cast<CUdeviceptr>(op.stream->word_on_device), op.seq,
                                             CU_STREAM_WRITE_VALUE_DEFAULT);
      if (r != CUDA_SUCCESS) {
        if (engine->word_failures_.fetch_add(1, std::memory_order_relaxed) == 0) {
          FL_LOG_WARN("GPU copy engine: cuStreamWriteValue32 failed (CUresult {}); the flush ends without its word", static_cast<int>(r));
        }
        code = cudaErrorUnknown;
      }
      break;
    }
    case StreamOp::Kind::kEvent:
      code = cudaEventRecord(op.event, stream);
      break;
  }
  // The flush's end (word or event) is issued: from now on its word or event speaks for it.
  if (code == 0 && op.last) op.stream->shared->launched.store(op.seq, std::memory_order_release);
  return code;
}

void CudaCopyEngine::Issuer::failed(const StreamOp& op, int code, bool) {
  // A failed runtime call leaves this thread's last error set: cleared, or the next kernel
  // launch here (launch_page_copy reports cudaGetLastError()) would take it for its own.
  cudaGetLastError();
  // Nothing of the flush may land after its failure is seen: wait for what the stream runs.
  const cudaError_t sync = cudaStreamSynchronize(op.stream->stream);
  cudaGetLastError();
  StreamShared& shared = *op.stream->shared;
  // Only the word could not be written: the flush's copies are all done (the stream is idle and sound).
  const bool copies_landed = sync == cudaSuccess && op.kind == StreamOp::Kind::kWord;
  if (!copies_landed) shared.failed[op.seq & shared.fail_mask].store(code, std::memory_order_release);
  // Its end is skipped (op_launcher.h): the word is moved from here instead — only when the
  // stream is sound. After a fault (sync fails) the word stays where the GPU left it: an earlier
  // flush whose copy faulted must not read as done; the stream query ends them all.
  if (sync == cudaSuccess && op.stream->word && op.kind != StreamOp::Kind::kEvent) {
    std::atomic_ref<uint32_t>(*op.stream->word).store(op.seq, std::memory_order_release);
  }
  shared.launched.store(op.seq, std::memory_order_release);
}

}  // namespace fabric_lib::gpu

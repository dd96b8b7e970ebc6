// The trainer side of RL weight transfer: registers the rank's FSDP (and TP/EP/PP) shards,
// gets its part of the static schedule from the controller once, and then, per training step,
// send(version) runs the pipeline that writes the new weights straight into inference memory:
//
//   for each parameter group (dense, then experts, ...), one after another:
//     1. contributions: raw rows of its shards that other trainers' staged fp8 blocks need, written
//        into their staging buffers (one-sided writes; imm gather(v, g));
//     2. its own tasks, in schedule order, with at most `watermark_bytes` of prepared buffers in
//        use at once: (H2D when the shard is offloaded and the preparer is on the GPU) prepare
//        (cast, fuse, fp8 128x128 block quantization with scales) into a buffer of the arena, then
//        WRITE it to every destination (imm data(v) on every WR); the buffer is freed when its
//        writes completed. Direct tasks (same dtype, contiguous rows) write from the shard itself;
//     3. its staged tasks once every contribution to its staging buffer has arrived;
//     4. the group ends when all its writes completed;
//   then the barrier: imm done(v) to every inference rank and every other trainer. send() returns
//   Ok when this trainer's writes completed and every other trainer reached its barrier too, so a
//   step that failed anywhere fails everywhere (within step_timeout).
//
// Prepare runs on the CPU for host-memory shards, or on the GPU (CUDA builds; GPU shards, or
// TrainerOptions::prepare_on_gpu). Thread safety: one thread drives an endpoint (add_*, connect, send).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include "fabric_lib/fabric_lib.h"
#include "fabric_lib/weights/codec.h"
#include "fabric_lib/weights/plan.h"
#include "fabric_lib/weights/types.h"

namespace fabric_lib::weights {

struct TrainerOptions {
  uint32_t rank = 0, world = 1;
  DomainAddress controller;                  // Controller::address()
  // Bytes of prepared buffers in use at once (the arena's size); at least the schedule's largest
  // task (PlanOptions::max_task_bytes bounds that). Default 64 MiB.
  uint64_t watermark_bytes = 64ull << 20;
  // A step (send) that has not finished by then fails with DeadlineExceeded. Default 30 s.
  std::chrono::milliseconds step_timeout{30000};
  std::chrono::milliseconds setup_timeout{60000};
  size_t frame_bytes = 60 * 1024;           // <= the engine's max_message_bytes
  // Prepare on the GPU (CUDA builds only): the arena is GPU memory, host (offloaded) sources are
  // copied H2D first, casts and fp8 quantization run as kernels. Implied when a shard region is
  // GPU memory. Default: on the CPU.
  bool prepare_on_gpu = false;
};

// Where one send() spent its time (seconds) and what it moved.
struct StepStats {
  double total_s = 0, prepare_s = 0, watermark_wait_s = 0, gather_wait_s = 0, write_wait_s = 0, barrier_s = 0;
  uint64_t bytes_written = 0, wrs = 0, tasks = 0, max_prepared_in_use = 0;
};

class TrainerEndpoint {
 public:
  // Takes over `engine`'s receive path (post_recvs). `engine` must outlive the endpoint.
  static Result<std::unique_ptr<TrainerEndpoint>> create(TransferEngine& engine, TrainerOptions options);
  ~TrainerEndpoint();
  TrainerEndpoint(const TrainerEndpoint&) = delete;
  TrainerEndpoint& operator=(const TrainerEndpoint&) = delete;

  // Registers [ptr, ptr + length) holding shards (host memory, or GPU memory in CUDA builds);
  // returns its region index for TrainerShard::region. Before connect(). The memory must stay
  // valid while the endpoint lives.
  Result<uint32_t> add_region(void* ptr, size_t length, MemoryKind kind = MemoryKind::kHost);
  // Declares one shard (layout.h's trainer_box says where FSDP/TP put it). Before connect().
  Status add_shard(TrainerShard shard);

  // Sends the metadata, receives and checks this rank's schedule, registers the staging buffer
  // and the arena, and waits for the other trainers' staging descriptors. A metadata problem
  // anywhere comes back as InvalidArgument with the controller's message.
  Status connect();

  // Writes version `version` (use each value once; 24 bits of it name the imms) from the current
  // contents of the shards. Blocks until the step is complete everywhere or failed.
  Status send(uint64_t version);

  const TrainerSetup& setup() const;  // after connect()
  const TrainerMetadata& metadata() const;
  StepStats last_step() const;

  struct State;  // internal (the step runner lives in its own file)

 private:
  explicit TrainerEndpoint(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

}  // namespace fabric_lib::weights

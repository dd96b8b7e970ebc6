// The static schedule of RL weight transfer, computed once by the controller from every rank's
// metadata (types.h) and reused every step.
//
// Each trainer writes the rows it owns straight into every destination shard they intersect (no
// FSDP full_tensor()). A "task" is one box of one source parameter that a trainer prepares
// (casts, or fp8-quantizes in 128x128 blocks of the destination) once and writes to every
// destination that holds that box (inference replicas, replicated tensors). Where an fp8 block
// straddles a trainer shard boundary, the owners' rows meet first in one trainer's staging
// buffer ("contributions": one-sided writes of raw shard rows), and that trainer ("gatherer")
// quantizes and sends. Among replicas of a trainer box (HSDP, dense parameters replicated across
// EP groups) the planner picks the owner that balances bytes across trainer ranks; every write is
// pinned to a domain (NIC) so that sender and receiver NIC loads stay even. Parameter groups
// (default: dense, then experts) run one after another on every trainer.
//
// The schedule is a pure function of the metadata and the options: identical in every process
// and run (fingerprint()).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fabric_lib/weights/types.h"

namespace fabric_lib::weights {

// Where a write goes.
struct Target {
  enum class Kind : uint8_t { kInference = 0, kTrainerStaging = 1 };  // pinned: on the wire
  Kind kind = Kind::kInference;
  uint32_t rank = 0;
  uint32_t region = 0;  // inference: index into the rank's regions; staging: 0
  friend bool operator==(const Target&, const Target&) = default;
  friend auto operator<=>(const Target&, const Target&) = default;
};

// One network write (a contiguous write, or `pages` equal rows of a strided box as a paged write:
// page i goes from src_offset + i * src_stride to dst_offset + i * dst_stride).
struct WriteOp {
  uint32_t target = 0;       // index into TrainerPlan::targets
  uint32_t domain = 0;       // the Pinned route (local domain i -> remote domain i)
  uint32_t pages = 1;
  uint64_t length = 0;       // bytes (per page)
  uint64_t src_offset = 0;   // in the task's prepared buffer, or in the shard's region when direct
  uint64_t dst_offset = 0;   // in the target region
  uint64_t src_stride = 0, dst_stride = 0;
  friend bool operator==(const WriteOp&, const WriteOp&) = default;
};

// Imms the target receives from one write on `domains` domains (engine rules, requests.h).
uint64_t imm_count(const WriteOp& w, size_t domains);

// One box of one source parameter, prepared once and written to every destination holding it.
struct PrepareTask {
  enum class Source : uint8_t { kShard = 0, kStaging = 1 };  // pinned: on the wire
  uint32_t group = 0;
  Source source = Source::kShard;
  uint32_t index = 0;            // kShard: the trainer's shard; kStaging: TrainerPlan::staged
  Box box;                       // in the source's 2-D view
  DType dtype = DType::kBf16;    // destination dtype
  // Write straight from the shard's memory (same dtype, no transform): no prepared buffer.
  bool direct = false;
  std::vector<WriteOp> writes;        // element data
  std::vector<WriteOp> scale_writes;  // fp8: block scales
  // Prepared layout: box rows x cols in `dtype` (pitch = cols), then for fp8 the scales
  // (ceil(rows/128) x ceil(cols/128) f32) at scale_offset().
  uint64_t data_bytes() const { return box.elements() * element_size(dtype); }
  uint64_t scale_offset() const { return (data_bytes() + 63) & ~uint64_t{63}; }
  uint64_t prepared_bytes() const;  // 0 when direct
  friend bool operator==(const PrepareTask&, const PrepareTask&) = default;
};

// Rows of one of the gatherer's own shards copied into a staging slot.
struct LocalPart {
  uint32_t shard = 0;
  Box box;
  friend bool operator==(const LocalPart&, const LocalPart&) = default;
};

// A staging slot on the gatherer: `box` of a source parameter in the source dtype (pitch =
// box cols), assembled from local parts and other trainers' contributions.
struct StagedUnit {
  uint32_t group = 0;
  DType source_dtype = DType::kBf16;
  Box box;
  uint64_t staging_offset = 0;
  std::vector<LocalPart> local_parts;
  friend bool operator==(const StagedUnit&, const StagedUnit&) = default;
};

// Raw rows of one of this trainer's shards written into another trainer's staging slot.
struct Contribution {
  uint32_t group = 0;
  uint32_t shard = 0;
  WriteOp write;  // src_offset relative to the shard's region
  friend bool operator==(const Contribution&, const Contribution&) = default;
};

// A trainer rank's part of the schedule.
struct TrainerPlan {
  uint32_t rank = 0;
  std::vector<Target> targets;
  std::vector<PrepareTask> tasks;           // in execution order (group by group)
  std::vector<StagedUnit> staged;           // slots in this trainer's staging buffer
  std::vector<Contribution> contributions;  // writes into other trainers' staging buffers
  std::vector<uint64_t> gather_imms;        // per group: imms its staging buffer receives
  uint64_t staging_bytes = 0;
  friend bool operator==(const TrainerPlan&, const TrainerPlan&) = default;
};

// An inference rank's part: how many imms of a version's data imm it receives.
struct InferencePlan {
  uint32_t rank = 0;
  uint64_t data_imms = 0;
  uint64_t bytes = 0;  // bytes written into it per step (data + scales)
  friend bool operator==(const InferencePlan&, const InferencePlan&) = default;
};

// A group of parameters ("MeshGroup"): a source belongs to the first group one of whose patterns
// occurs in its name, else to the first group without patterns.
struct GroupRule {
  std::string name;
  std::vector<std::string> patterns;
  friend bool operator==(const GroupRule&, const GroupRule&) = default;
};

struct PlanOptions {
  // Largest prepared task, bytes: big boxes are cut into row chunks (fp8: 128-row multiples).
  // Bounds the trainer's memory watermark from below. Default 16 MiB.
  uint64_t max_task_bytes = 16ull << 20;
  // Execution order of the parameter groups. Default: dense (catch-all), then experts.
  std::vector<GroupRule> groups = {{"dense", {}}, {"experts", {".experts."}}};
  // Accept trainer parameters that no inference tensor uses (default: an error naming them,
  // since it usually means a wrong name mapping).
  bool allow_unused_sources = false;
  friend bool operator==(const PlanOptions&, const PlanOptions&) = default;
};

struct Schedule {
  std::vector<TrainerPlan> trainers;       // by rank
  std::vector<InferencePlan> inference;    // by rank
  std::vector<std::string> group_names;
  uint32_t domains = 1;
  friend bool operator==(const Schedule&, const Schedule&) = default;
};

// Validates the metadata (a clear InvalidArgument naming the parameter and rank on the first
// problem: missing or unused source, shape/dtype mismatch between trainers, trainer boxes that
// overlap or leave a hole, pieces outside their source or not tiling their tensor, fp8 pieces
// off the 128 grid, regions too small or not writable, differing domain counts) and computes the
// schedule. `trainers` and `inference` must hold every rank once (any order).
Result<Schedule> plan_schedule(const std::vector<TrainerMetadata>& trainers, const std::vector<InferenceMetadata>& inference,
                               const PlanOptions& options = {});

// FNV-1a 64 of the schedule's canonical encoding (codec.h): equal schedules, equal fingerprints.
uint64_t fingerprint(const Schedule& s);

// Figures of a schedule, for benchmarks and logs.
struct ScheduleStats {
  std::vector<uint64_t> trainer_bytes;      // bytes each trainer sends (data, scales, contributions)
  std::vector<uint64_t> trainer_wrs;        // WRs each trainer posts (barriers excluded)
  std::vector<uint64_t> trainer_prepared;   // bytes each trainer prepares (reads as source)
  std::vector<uint64_t> trainer_nic_bytes;  // [trainer * domains + d]
  std::vector<uint64_t> inference_bytes;    // bytes each inference rank receives
  std::vector<uint64_t> inference_nic_bytes;
  uint64_t tasks = 0, staged_units = 0, contributions = 0;
};
ScheduleStats schedule_stats(const Schedule& s);

}  // namespace fabric_lib::weights

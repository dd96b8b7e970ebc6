// TrainerEndpoint: registration, the setup exchange with the controller, and the checks of the
// schedule it receives (it comes from the network: every index, box and byte range is checked
// against this rank's own shards and buffers before the first step).
#include "trainer_state.h"

#include "fabric_lib/weights/fp8_cuda.h"

namespace fabric_lib::weights {

void TrainerEndpoint::State::on_message(std::vector<uint8_t> m) {
  Result<MessageKind> kind = message_kind(m);
  if (!kind.ok()) return;
  std::lock_guard<std::mutex> lock(mu);
  if (*kind == MessageKind::kTrainerSetup && !setup) {
    Result<TrainerSetup> s = decode_trainer_setup(m);
    if (s.ok()) setup = std::move(*s);
  } else if (*kind == MessageKind::kPeers && !peers) {
    Result<Peers> p = decode_peers(m);
    if (p.ok()) peers = std::move(*p);
  } else if (*kind == MessageKind::kPlanError && !plan_error) {
    Result<PlanError> e = decode_plan_error(m);
    if (e.ok()) plan_error = e->message;
  }
  cv.notify_all();
}

TrainerEndpoint::TrainerEndpoint(std::shared_ptr<State> state) : state_(std::move(state)) {}

TrainerEndpoint::~TrainerEndpoint() {
  State& s = *state_;
  for (const State::Region& r : s.regions) (void)s.engine->unregister_memory(r.reg.handle);
  if (s.staging_reg.handle.valid()) (void)s.engine->unregister_memory(s.staging_reg.handle);
  if (s.arena_reg.handle.valid()) (void)s.engine->unregister_memory(s.arena_reg.handle);
}

Result<std::unique_ptr<TrainerEndpoint>> TrainerEndpoint::create(TransferEngine& engine, TrainerOptions options) {
  if (options.world == 0 || options.rank >= options.world) return invalid_argument("trainer endpoint: rank out of range");
  if (options.controller.empty()) return invalid_argument("trainer endpoint: no controller address");
  if (options.watermark_bytes < 4096) return invalid_argument("trainer endpoint: watermark below 4096 bytes");
  auto st = std::make_shared<State>();
  st->engine = &engine;
  st->step_metrics = detail::StepMetrics(engine);
  st->options = std::move(options);
  FABRIC_LIB_RETURN_IF_ERROR(detail::open_endpoint(st, engine));
  return std::unique_ptr<TrainerEndpoint>(new TrainerEndpoint(std::move(st)));
}

Result<uint32_t> TrainerEndpoint::add_region(void* ptr, size_t length, MemoryKind kind) {
  State& s = *state_;
  if (s.connected) return Status(ErrorCode::kFailedPrecondition, "trainer endpoint: add_region after connect()");
  if (kind == MemoryKind::kAuto) return invalid_argument("trainer endpoint: name the memory kind (host or cuda)");
  if (kind == MemoryKind::kCuda && !fabric_lib_weights_cuda_available()) {
    return unsupported("trainer endpoint: GPU shards need a CUDA build of fabric_lib_weights");
  }
  Result<MrRegistration> reg = s.engine->register_memory(ptr, length, Access::kLocalOnly, kind);
  if (!reg.ok()) return reg.status();
  s.regions.push_back({*reg, static_cast<uint8_t*>(ptr), length, kind});
  return static_cast<uint32_t>(s.regions.size() - 1);
}

Status TrainerEndpoint::add_shard(TrainerShard shard) {
  State& s = *state_;
  if (s.connected) return Status(ErrorCode::kFailedPrecondition, "trainer endpoint: add_shard after connect()");
  const std::string where = "trainer rank " + std::to_string(s.options.rank) + " shard '" + shard.name + "'";
  if (shard.region >= s.regions.size()) return invalid_argument(where + ": region " + std::to_string(shard.region) + " was not added");
  const uint64_t bytes = shard.box.elements() * element_size(shard.dtype);
  if (shard.offset > s.regions[shard.region].length || bytes > s.regions[shard.region].length - shard.offset) {
    return invalid_argument(where + ": its " + std::to_string(bytes) + " bytes at offset " + std::to_string(shard.offset) + " do not fit its region");
  }
  s.metadata.shards.push_back(std::move(shard));
  return ok_status();
}

namespace {
bool convertible(DType from, DType to) {
  return from == to || to == DType::kFp8E4m3 || (from == DType::kF32 && to == DType::kBf16) ||
         (from == DType::kBf16 && to == DType::kF32);
}
bool fits(const WriteOp& w, uint64_t length) {
  const uint64_t last = w.src_offset + static_cast<uint64_t>(w.pages - 1) * w.src_stride;
  return w.src_offset <= length && last <= length && w.length <= length - last;
}
}  // namespace

Status TrainerEndpoint::State::check_plan() const {
  const TrainerSetup& su = *setup;
  const TrainerPlan& p = su.plan;
  auto bad = [&](const std::string& m) { return malformed("schedule for trainer rank " + std::to_string(options.rank) + ": " + m); };
  if (p.rank != options.rank || su.trainers != options.world) return bad("addressed to another rank or world");
  if (su.domains != engine->num_domains()) return bad("planned for " + std::to_string(su.domains) + " domains");
  for (const Target& t : p.targets) {
    if (t.kind == Target::Kind::kTrainerStaging && t.rank == options.rank) return bad("a contribution to itself");
  }
  const auto& shards = metadata.shards;
  for (const PrepareTask& t : p.tasks) {
    DType src;
    if (t.source == PrepareTask::Source::kShard) {
      if (t.index >= shards.size() || !shards[t.index].box.contains(t.box)) return bad("a task outside its shard");
      src = shards[t.index].dtype;
    } else {
      if (t.index >= p.staged.size() || p.staged[t.index].box != t.box || t.direct) return bad("a staged task that does not match its unit");
      src = p.staged[t.index].source_dtype;
    }
    if (!convertible(src, t.dtype) || (t.direct && src != t.dtype)) return bad("an unsupported conversion");
    if (t.prepared_bytes() > options.watermark_bytes) {
      return bad("a task of " + std::to_string(t.prepared_bytes()) + " prepared bytes exceeds the watermark of " + std::to_string(options.watermark_bytes));
    }
    const uint64_t src_len = t.direct ? regions[shards[t.index].region].length : t.prepared_bytes();
    for (const WriteOp& w : t.writes) {
      if (!fits(w, src_len) || p.targets[w.target].kind != Target::Kind::kInference) return bad("a write outside its source");
    }
    for (const WriteOp& w : t.scale_writes) {
      if (t.dtype != DType::kFp8E4m3 || !fits(w, src_len) || p.targets[w.target].kind != Target::Kind::kInference) return bad("a scale write outside its source");
    }
  }
  for (const StagedUnit& u : p.staged) {
    const uint64_t bytes = u.box.elements() * element_size(u.source_dtype);
    if (u.staging_offset > p.staging_bytes || bytes > p.staging_bytes - u.staging_offset) return bad("a staging slot outside the staging buffer");
    for (const LocalPart& l : u.local_parts) {
      if (l.shard >= shards.size() || !shards[l.shard].box.contains(l.box) || shards[l.shard].dtype != u.source_dtype) return bad("a local part outside its shard");
    }
  }
  for (const Contribution& c : p.contributions) {
    if (c.shard >= shards.size() || !fits(c.write, regions[shards[c.shard].region].length) ||
        p.targets[c.write.target].kind != Target::Kind::kTrainerStaging) {
      return bad("a contribution outside its shard");
    }
  }
  return ok_status();
}

Status TrainerEndpoint::connect() {
  State& s = *state_;
  if (s.connected) return Status(ErrorCode::kFailedPrecondition, "trainer endpoint: connect() called twice");
  s.connected = true;
  const Clock::time_point deadline = Clock::now() + s.options.setup_timeout;
  FABRIC_LIB_RETURN_IF_ERROR(s.mailbox->send(s.options.controller, encode(s.metadata), deadline));
  {
    std::unique_lock<std::mutex> lock(s.mu);
    if (!s.cv.wait_until(lock, deadline, [&] { return s.setup.has_value() || s.plan_error.has_value(); })) {
      return Status(ErrorCode::kDeadlineExceeded, "trainer rank " + std::to_string(s.options.rank) + ": no schedule from the controller");
    }
    if (s.plan_error) return invalid_argument(*s.plan_error);
  }
  FABRIC_LIB_RETURN_IF_ERROR(s.check_plan());
  s.staging.assign(std::max<uint64_t>(s.setup->plan.staging_bytes, 64), 0);
  Result<MrRegistration> st = s.engine->register_memory(s.staging.data(), s.staging.size(), Access::kRemoteWrite);
  if (!st.ok()) return st.status();
  s.staging_reg = *st;
  bool gpu = s.options.prepare_on_gpu;
  for (const State::Region& r : s.regions) gpu |= r.kind == MemoryKind::kCuda;
  if (gpu) {
    Result<std::unique_ptr<detail::Preparer>> p = detail::make_cuda_preparer();
    if (!p.ok()) return p.status();
    s.preparer = std::move(*p);
  } else {
    s.preparer = detail::make_cpu_preparer();
  }
  Result<uint8_t*> mem = s.preparer->arena(s.options.watermark_bytes);
  if (!mem.ok()) return mem.status();
  s.arena_memory = *mem;
  Result<MrRegistration> ar = s.engine->register_memory(s.arena_memory, s.options.watermark_bytes, Access::kLocalOnly,
                                                        s.preparer->arena_kind());
  if (!ar.ok()) return ar.status();
  s.arena_reg = *ar;
  s.arena = std::make_unique<detail::Arena>(s.options.watermark_bytes);
  FABRIC_LIB_RETURN_IF_ERROR(s.mailbox->send(s.options.controller, encode(TrainerReady{s.options.rank, s.staging_reg.desc}), deadline));
  std::unique_lock<std::mutex> lock(s.mu);
  if (!s.cv.wait_until(lock, deadline, [&] { return s.peers.has_value() || s.plan_error.has_value(); })) {
    return Status(ErrorCode::kDeadlineExceeded, "trainer rank " + std::to_string(s.options.rank) + ": no peers from the controller");
  }
  if (s.plan_error) return invalid_argument(*s.plan_error);
  if (s.peers->trainer_staging.size() != s.options.world) return malformed("peers message for another world size");
  const TrainerSetup& su = *s.setup;
  for (size_t i = 0; i < su.plan.targets.size(); ++i) {
    const Target& t = su.plan.targets[i];
    s.targets.push_back(t.kind == Target::Kind::kInference ? su.target_descs[i] : s.peers->trainer_staging[t.rank]);
  }
  s.barrier_peers = su.inference_barrier;
  for (uint32_t r = 0; r < s.options.world; ++r) {
    if (r != s.options.rank) s.barrier_peers.push_back(s.peers->trainer_staging[r]);
  }
  s.ready = true;
  return ok_status();
}

const TrainerSetup& TrainerEndpoint::setup() const { return *state_->setup; }
const TrainerMetadata& TrainerEndpoint::metadata() const { return state_->metadata; }
StepStats TrainerEndpoint::last_step() const { return state_->last; }

}  // namespace fabric_lib::weights

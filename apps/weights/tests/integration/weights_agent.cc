#include "weights_agent.h"

#include <poll.h>
#include <sys/syscall.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "fabric_lib/weights/weights.h"
#include "support/test_model.h"

#if FABRIC_LIB_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace fabric_lib::weights::testing {
namespace {

// Variant "gpu": shards and destinations live in GPU memory (CUDA builds), mirrored from / into
// the host buffers the checks use.
struct DeviceMirror {
  void* ptr = nullptr;
  size_t bytes = 0;
  bool alloc(size_t n) {
#if FABRIC_LIB_HAVE_CUDA
    bytes = n;
    // The inference side's regions are peer-written: a size peers map with large pages.
    return cudaMalloc(&ptr, peer_written_cuda_bytes(n)) == cudaSuccess;
#else
    (void)n;
    return false;
#endif
  }
  bool upload(const std::vector<uint8_t>& h) {
#if FABRIC_LIB_HAVE_CUDA
    return cudaMemcpy(ptr, h.data(), h.size(), cudaMemcpyHostToDevice) == cudaSuccess;
#else
    (void)h;
    return false;
#endif
  }
  bool download(std::vector<uint8_t>& h) {
#if FABRIC_LIB_HAVE_CUDA
    return cudaMemcpy(h.data(), ptr, h.size(), cudaMemcpyDeviceToHost) == cudaSuccess;
#else
    (void)h;
    return false;
#endif
  }
  ~DeviceMirror() {
#if FABRIC_LIB_HAVE_CUDA
    if (ptr) cudaFree(ptr);
#endif
  }
};

std::string err(const Status& st) { return "error " + std::string(error_code_name(st.code())) + " " + st.message(); }

Result<std::unique_ptr<TransferEngine>> build_engine(const std::string& provider, size_t domains) {
  TransferEngineBuilder b;
  b.provider(provider).domains_per_group(domains);
  if (provider == "tcp") b.interfaces({"lo"});
  // shm's calls may hang for good on a peer killed inside them (docs/failure-semantics.md); the
  // watchdog ends such a group after stall_timeout, so the kill tests' steps fail by then: 4 s
  // keeps that within their deadline's slack (the default, 10 s, does not).
  if (provider == "shm") b.stall_timeout(std::chrono::seconds(4));
  return b.build();
}

// Writes the first half of this trainer's tasks' data writes for `version` by hand (what a
// trainer that dies mid-step leaves behind), waiting for them to complete.
Status partial_writes(TransferEngine& engine, const TrainerEndpoint& ep, std::vector<uint8_t>& arena, uint64_t version) {
  const TrainerSetup& su = ep.setup();
  Result<MrRegistration> shards = engine.register_memory(arena.data(), arena.size(), Access::kLocalOnly);
  if (!shards.ok()) return shards.status();
  std::vector<uint8_t> scratch(16 << 20);
  Result<MrRegistration> sreg = engine.register_memory(scratch.data(), scratch.size(), Access::kLocalOnly);
  if (!sreg.ok()) return sreg.status();
  CompletionCounter counter;
  uint64_t n = 0;
  const auto& tasks = su.plan.tasks;
  for (size_t i = 0; i < tasks.size() / 2; ++i) {
    const PrepareTask& t = tasks[i];
    if (t.source != PrepareTask::Source::kShard || t.prepared_bytes() > scratch.size()) continue;
    const TrainerShard& sh = ep.metadata().shards[t.index];
    MrHandle src = shards->handle;
    if (!t.direct) {
      const uint8_t* in = arena.data() + sh.offset + ((t.box.r0 - sh.box.r0) * sh.box.cols() + (t.box.c0 - sh.box.c0)) * element_size(sh.dtype);
      FABRIC_LIB_RETURN_IF_ERROR(prepare_on_cpu(t, sh.dtype, in, sh.box.cols(), scratch.data()));
      src = sreg->handle;
    }
    for (const WriteOp& w : t.writes) {
      if (w.pages != 1) continue;
      WriteRequest r{src, w.src_offset, su.target_descs[w.target], w.dst_offset, w.length, data_imm(version), Pinned{w.domain}};
      Result<TransferId> id = engine.submit_write(std::move(r), Completion::counter(counter));
      if (!id.ok()) return id.status();
      ++n;
    }
  }
  if (!counter.wait_for(n, std::chrono::seconds(20))) return Status(ErrorCode::kDeadlineExceeded, "partial writes did not complete");
  return ok_status();
}

struct StepMetricCounts {
  uint64_t steps_ok = 0, total_samples = 0, write_wait_samples = 0;
};

// The weights app's series on the engine's MetricsRegistry, read through TransferEngine::metrics().
StepMetricCounts step_metric_counts(const TransferEngine& engine) {
  StepMetricCounts c;
  for (const AppMetric& m : engine.metrics().app) {
    if (m.name == "fabric_lib_weights_steps_total" && m.labels == MetricLabels{{"outcome", "ok"}}) c.steps_ok = static_cast<uint64_t>(m.value);
    if (m.name == "fabric_lib_weights_step_seconds" && m.labels == MetricLabels{{"stage", "total"}}) c.total_samples = m.histogram.count;
    if (m.name == "fabric_lib_weights_step_seconds" && m.labels == MetricLabels{{"stage", "write_wait"}}) c.write_wait_samples = m.histogram.count;
  }
  return c;
}

int trainer_main(const AgentSpec& s, tools::ControlChannel& ch) {
  Result<std::unique_ptr<TransferEngine>> engine = build_engine(s.provider, s.domains);
  if (!engine.ok()) return ch.send("connect-error " + err(engine.status())), 1;
  TrainerLayout layout = trainer_layout(s.rank, s.world);
  if (s.variant == "bad_shape" && s.rank == 1) layout.shards[0].global_shape[0] += 128;
  std::vector<uint8_t> arena(layout.arena_bytes);
  TrainerOptions o;
  o.rank = s.rank;
  o.world = s.world;
  o.controller = *DomainAddress::from_hex(s.controller_hex);
  o.step_timeout = std::chrono::milliseconds(s.step_timeout_ms);
  o.watermark_bytes = 1 << 20;  // small: the watermark is exercised
  Result<std::unique_ptr<TrainerEndpoint>> ep = TrainerEndpoint::create(**engine, o);
  if (!ep.ok()) return ch.send("connect-error " + err(ep.status())), 1;
  const bool gpu = s.variant == "gpu";
  DeviceMirror d_arena;
  if (gpu && !d_arena.alloc(arena.size())) return ch.send("connect-error cudaMalloc"), 1;
  Result<uint32_t> region = gpu ? (*ep)->add_region(d_arena.ptr, arena.size(), MemoryKind::kCuda) : (*ep)->add_region(arena.data(), arena.size());
  if (!region.ok()) return ch.send("connect-error " + err(region.status())), 1;
  for (const TrainerShard& sh : layout.shards) (void)(*ep)->add_shard(sh);
  Status st = (*ep)->connect();
  ch.send(st.ok() ? "connected " + std::to_string((*ep)->setup().fingerprint) : "connect-" + err(st));
  while (true) {
    auto line = ch.recv(std::chrono::minutes(5));
    if (!line || *line == "exit") break;
    const auto w = tools::split_words(*line);
    if (w.size() == 2 && (w[0] == "send" || w[0] == "partial")) {
      const uint64_t v = std::stoull(w[1]);
      fill_trainer_arena(layout, v, arena.data());
      if (gpu && !d_arena.upload(arena)) {
        ch.send("error upload");
        continue;
      }
      if (w[0] == "partial") {
        Status p = partial_writes(**engine, **ep, arena, v);
        ch.send(p.ok() ? "dying" : err(p));
        ::kill(::getpid(), SIGKILL);
      }
      Status r = (*ep)->send(v);
      const StepStats x = (*ep)->last_step();
      // ... and what the engine's MetricsRegistry holds of the steps so far (steps ok, samples of
      // the total and the write_wait stage histograms).
      const StepMetricCounts m = step_metric_counts(**engine);
      ch.send(r.ok() ? "ok " + std::to_string(x.bytes_written) + " " + std::to_string(x.wrs) + " " +
                           std::to_string(x.max_prepared_in_use) + " " + std::to_string(m.steps_ok) + " " +
                           std::to_string(m.total_samples) + " " + std::to_string(m.write_wait_samples)
                     : err(r));
    } else {
      ch.send("error unknown command");
    }
  }
  (*engine)->stop();
  return 0;
}

int inference_main(const AgentSpec& s, tools::ControlChannel& ch) {
  Result<std::unique_ptr<TransferEngine>> engine = build_engine(s.provider, s.domains);
  if (!engine.ok()) return ch.send("connect-error " + err(engine.status())), 1;
  InferenceLayout layout = inference_layout(s.rank, s.world, s.fp8);
  if (s.variant == "missing_source") layout.tensors[3].pieces[0].source += "_MISSING";
  std::vector<uint8_t> data(layout.data_bytes, 0xee), scales(layout.scale_bytes, 0xee);
  InferenceOptions o;
  o.rank = s.rank;
  o.world = s.world;
  o.controller = *DomainAddress::from_hex(s.controller_hex);
  Result<std::unique_ptr<InferenceEndpoint>> ep = InferenceEndpoint::create(**engine, o);
  if (!ep.ok()) return ch.send("connect-error " + err(ep.status())), 1;
  const bool gpu = s.variant == "gpu";
  DeviceMirror d_data, d_scales;
  if (gpu && !(d_data.alloc(data.size()) && d_scales.alloc(scales.size()) && d_data.upload(data) && d_scales.upload(scales))) {
    return ch.send("connect-error cudaMalloc"), 1;
  }
  Result<uint32_t> r0 = gpu ? (*ep)->add_region(d_data.ptr, data.size(), MemoryKind::kCuda) : (*ep)->add_region(data.data(), data.size());
  Result<uint32_t> r1 = gpu ? (*ep)->add_region(d_scales.ptr, scales.size(), MemoryKind::kCuda) : (*ep)->add_region(scales.data(), scales.size());
  if (!r0.ok() || !r1.ok()) return ch.send("connect-error region"), 1;
  for (const InferenceTensor& t : layout.tensors) (void)(*ep)->add_tensor(t);
  Status st = (*ep)->connect();
  ch.send(st.ok() ? "connected " + std::to_string((*ep)->setup().fingerprint) : "connect-" + err(st));
  std::vector<uint8_t> want_d(data.size()), want_s(scales.size());
  while (true) {
    auto line = ch.recv(std::chrono::minutes(5));
    if (!line || *line == "exit") break;
    const auto w = tools::split_words(*line);
    if (w.size() == 3 && w[0] == "wait") {
      const uint64_t v = std::stoull(w[1]);
      Status r = (*ep)->wait_for_version(v, std::chrono::milliseconds(std::stoull(w[2])));
      if (!r.ok()) {
        ch.send(err(r));
        continue;
      }
      if (gpu && !(d_data.download(data) && d_scales.download(scales))) {
        ch.send("error download");
        continue;
      }
      reference_load(layout, v, want_d.data(), want_s.data(), 0xee);
      std::string bad;
      for (const InferenceTensor& t : layout.tensors) {
        if (std::memcmp(data.data() + t.offset, want_d.data() + t.offset, t.bytes()) != 0 ||
            std::memcmp(scales.data() + t.scale_offset, want_s.data() + t.scale_offset, t.scale_bytes()) != 0) {
          bad = t.name;
          break;
        }
      }
      if (bad.empty() && (data != want_d || scales != want_s)) bad = "<bytes outside the tensors>";
      ch.send(bad.empty() ? "ok" : "mismatch " + bad);
    } else {
      ch.send("error unknown command");
    }
  }
  (*engine)->stop();
  return 0;
}

}  // namespace

int run_weights_agent(int argc, char** argv) {
  if (argc != 11) return 2;
  tools::ControlChannel ch(std::atoi(argv[0]));
  AgentSpec s;
  s.role = argv[1];
  s.rank = static_cast<uint32_t>(std::stoul(argv[2]));
  s.world = static_cast<uint32_t>(std::stoul(argv[3]));
  s.provider = argv[4];
  s.domains = std::stoul(argv[5]);
  s.fp8 = std::string(argv[6]) == "1";
  s.controller_hex = argv[7];
  s.step_timeout_ms = std::stoull(argv[8]);
  s.variant = argv[9];
  return s.role == "trainer" ? trainer_main(s, ch) : inference_main(s, ch);
}

WeightsAgent::WeightsAgent(const AgentSpec& s) {
  auto [mine, theirs] = tools::make_channel_pair();
  const int child_fd = theirs.fd();
  std::vector<std::string> args = {"weights_integration_tests", "--weights-agent", std::to_string(child_fd), s.role,
                                   std::to_string(s.rank), std::to_string(s.world), s.provider, std::to_string(s.domains),
                                   s.fp8 ? "1" : "0", s.controller_hex, std::to_string(s.step_timeout_ms), s.variant, "-"};
  pid_ = tools::spawn_self(args, child_fd);
  channel_ = std::move(mine);
}

std::string WeightsAgent::recv(std::chrono::milliseconds timeout) {
  auto r = channel_.recv(timeout);
  return r ? *r : "<no reply>";
}

int WeightsAgent::wait_exit(std::chrono::milliseconds timeout) {
  if (reaped_) return status_;
  // Wait on the child's pidfd (readable once it has exited), then reap it.
  const int fd = static_cast<int>(syscall(SYS_pidfd_open, pid_, 0));
  if (fd >= 0) {
    pollfd p{fd, POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(timeout.count()));
    close(fd);
    if (ready <= 0) return -1;
  }
  int status = 0;
  if (waitpid(pid_, &status, fd >= 0 ? 0 : WNOHANG) != pid_) return -1;
  reaped_ = true;
  status_ = status;
  return status;
}

WeightsAgent::~WeightsAgent() {
  if (pid_ <= 0 || reaped_) return;
  channel_.send("exit");
  if (wait_exit(std::chrono::seconds(10)) == -1) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

}  // namespace fabric_lib::weights::testing

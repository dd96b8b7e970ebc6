// The target process of fabric-bench --provider ipc: an ipc engine and one GPU region on
// the peer GPU, answering (one command per message, replies "ok [words]" or "error <text>"):
//   setup <domains> <spin>            (re)build the engine                   -> ok <gpu>
//   region <bytes>                    new zeroed GPU region, registered      -> ok <desc hex>
//   clear <bytes>                     zero the region's first bytes
//   wait <imm> <n>                    wait until n imms of that value arrived (consumes them; a
//                                     surplus is an error)
//   check <imm> <n> <bytes> <hash>    wait, then compare the hash of the region's first bytes
//   echo <ping> <pong> <desc hex>     answer every <ping> imm with a <pong> imm to desc
//   echo_end <ping> <n>               stop answering; ok when exactly n pings arrived
//   bye                               ok, then exit
#include "fabric_bench/ipc_bench.h"

#if FABRIC_LIB_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include <cstdio>
#include <memory>

#include "common/imm_wait.h"
#include "fabric_bench/verify.h"
#include "fabric_lib/fabric_lib.h"
#if FABRIC_LIB_HAVE_CUDA
#include "common/cuda_region.h"
#endif

namespace fabric_lib::bench {

#if FABRIC_LIB_HAVE_CUDA
namespace {

constexpr auto kWaitTimeout = std::chrono::seconds(120);

std::string error_reply(const Status& s) { return "error " + s.to_string(); }

class IpcTarget {
 public:
  IpcTarget() : gpu_(tools::peer_gpu()) { cudaSetDevice(gpu_); }
  ~IpcTarget() { reset(); }

  std::string handle(const std::vector<std::string>& w, bool* done);

 private:
  void reset() {
    if (engine_) engine_->stop();  // before the memory it writes into goes
    engine_.reset();
    region_.reset();
  }
  Status wait_imms(uint32_t imm, uint64_t n) {
    return tools::wait_for_imms(engine_->imms(), imm, n, kWaitTimeout, /*exact=*/true);
  }

  int gpu_ = 0;
  std::unique_ptr<TransferEngine> engine_;
  std::unique_ptr<tools::Region> region_;
  MrRegistration reg_;
  std::atomic<uint64_t> pings_{0};
};

std::string IpcTarget::handle(const std::vector<std::string>& w, bool* done) {
  if (w.empty()) return "error empty command";
  const std::string& cmd = w[0];
  auto u64 = [&](size_t i) -> uint64_t { return i < w.size() ? std::strtoull(w[i].c_str(), nullptr, 10) : 0; };
  if (cmd == "bye") {
    *done = true;
    return "ok";
  }
  if (cmd == "setup" && w.size() == 3) {
    reset();
    Result<std::unique_ptr<TransferEngine>> e = TransferEngineBuilder()
                                                    .provider("ipc")
                                                    .domains_per_group(u64(1))
                                                    .idle_policy(w[2] == "1" ? IdlePolicy::kSpin : IdlePolicy::kAdaptive)
                                                    .build();
    if (!e.ok()) return error_reply(e.status());
    engine_ = std::move(e).value();
    return "ok " + std::to_string(gpu_);
  }
  if (!engine_) return "error no setup";
  if (cmd == "region" && w.size() == 2) {
    if (region_) {
      engine_->unregister_memory(reg_.handle);
      region_.reset();
    }
    Result<std::unique_ptr<tools::Region>> made = tools::make_cuda_region(u64(1), gpu_);
    if (!made.ok()) return error_reply(made.status());
    region_ = std::move(made).value();
    Result<MrRegistration> r = engine_->register_memory(region_->data(), region_->size(), Access::kRemoteWrite,
                                                        MemoryKind::kCuda);
    if (!r.ok()) return error_reply(r.status());
    reg_ = *r;
    return "ok " + reg_.desc.to_hex();
  }
  if (!region_) return "error no region";
  if (cmd == "clear" && w.size() == 2) {
    if (u64(1) > region_->size()) return "error range";
    std::vector<uint8_t> zeros(u64(1), 0);
    Status s = region_->write(0, zeros.data(), zeros.size());
    return s.ok() ? "ok" : error_reply(s);
  }
  if (cmd == "wait" && w.size() == 3) {
    Status s = wait_imms(static_cast<uint32_t>(u64(1)), u64(2));
    return s.ok() ? "ok" : error_reply(s);
  }
  if (cmd == "check" && w.size() == 5) {
    Status s = wait_imms(static_cast<uint32_t>(u64(1)), u64(2));
    if (!s.ok()) return error_reply(s);
    const uint64_t n = u64(3);
    std::vector<uint8_t> host(n);
    if (Status r = region_->read(0, host.data(), n); !r.ok()) return error_reply(r);
    const uint64_t h = hash_region(host.data(), n);
    return std::to_string(h) == w[4] ? "ok" : "error the region's bytes differ from the source's (hash " + std::to_string(h) + ")";
  }
  if (cmd == "echo" && w.size() == 4) {
    Result<MrDesc> dst = MrDesc::from_hex(w[3]);
    if (!dst.ok()) return error_reply(dst.status());
    const uint32_t ping = static_cast<uint32_t>(u64(1)), pong = static_cast<uint32_t>(u64(2));
    pings_ = 0;
    TransferEngine* engine = engine_.get();
    engine->imms().set_observer([this, engine, ping, pong, d = *dst](uint32_t imm) {
      if (imm != ping) return;
      pings_.fetch_add(1);
      (void)engine->submit_imm(pong, d, Completion());
    });
    return "ok";
  }
  if (cmd == "echo_end" && w.size() == 3) {
    engine_->imms().set_observer(nullptr);
    const uint32_t ping = static_cast<uint32_t>(u64(1));
    engine_->imms().release(ping);
    return pings_.load() == u64(2) ? "ok" : "error " + std::to_string(pings_.load()) + " pings arrived, not " + w[2];
  }
  return "error unknown command " + cmd;
}

}  // namespace

int serve_ipc_target(tools::ControlChannel channel) {
  IpcTarget target;
  bool done = false;
  while (!done) {
    std::optional<std::string> command = channel.recv(std::chrono::minutes(10));
    if (!command) return 1;
    if (!channel.send(target.handle(tools::split_words(*command), &done))) return 1;
  }
  return 0;
}

#else

int serve_ipc_target(tools::ControlChannel channel) {
  channel.send("error fabric-bench --provider ipc needs a CUDA build");
  return 2;
}

#endif

}  // namespace fabric_lib::bench

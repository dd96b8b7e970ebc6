#include "nvlink_agent.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <thread>

#include "common/control_channel.h"
#include "common/pattern.h"
#include "kernels.h"

namespace fabric_lib::device_tests {
namespace {

// The region starts this far into its allocation: 16-byte aligned, not page aligned.
constexpr size_t kRegionOffset = 12544;

uint64_t num(const std::string& s) { return std::stoull(s); }

struct GpuAgent {
  std::unique_ptr<TransferEngine> engine;
  uint8_t* alloc = nullptr;
  uint8_t* region = nullptr;
  size_t bytes = 0;
  MrRegistration reg;
  MrRegistration source;
  std::mutex mu;
  std::vector<std::string> message_hashes;
  std::atomic<size_t> messages{0};
  std::vector<std::atomic<int>> burst_calls;
  std::map<std::string, size_t> burst_outcomes;
  // flag_check
  std::unique_ptr<MappedWord> flag;
  uint64_t* result = nullptr;
  cudaStream_t stream = nullptr;

  ~GpuAgent() {
    if (engine) engine->stop();  // before the memory its requests may still use
    if (stream) {
      if (flag) flag->store(2);  // a kernel still waiting gives up (error value), then the word may go
      cudaStreamSynchronize(stream);
      cudaStreamDestroy(stream);
    }
    cudaFree(result);
    cudaFree(alloc);
  }
  std::string hash(uint64_t off, uint64_t len) {
    std::vector<uint8_t> host(len);
    if (len && cudaMemcpy(host.data(), region + off, len, cudaMemcpyDeviceToHost) != cudaSuccess) return "error cudaMemcpy";
    return testing::hash_hex(host.data(), len);
  }
  std::string handle(const std::vector<std::string>& w);
};

std::string GpuAgent::handle(const std::vector<std::string>& w) {
  const std::string& cmd = w[0];
  if (cmd == "expect" && w.size() == 4) {
    CompletionCounter c;
    const uint32_t imm = static_cast<uint32_t>(num(w[1]));
    Status s = engine->imms().expect(imm, num(w[2]), Completion::counter(c));
    if (!s.ok()) return "error " + s.to_string();
    if (!c.wait_for(1, std::chrono::milliseconds(num(w[3])))) {
      engine->imms().release(imm);
      return "timeout count=" + std::to_string(engine->imms().count(imm));
    }
    return c.done == 1 ? "ok" : "failed";
  }
  if (cmd == "count" && w.size() == 2) return std::to_string(engine->imms().count(static_cast<uint32_t>(num(w[1]))));
  if (cmd == "hash" && w.size() == 3) {
    const uint64_t off = num(w[1]), len = num(w[2]);
    if (off > bytes || len > bytes - off) return "error range";
    return hash(off, len);
  }
  if (cmd == "fill" && w.size() == 2) {
    std::vector<uint8_t> host(bytes);
    tools::fill_pattern(host.data(), bytes, num(w[1]));
    return cudaMemcpy(region, host.data(), bytes, cudaMemcpyHostToDevice) == cudaSuccess ? "ok" : "error cudaMemcpy";
  }
  if (cmd == "zero") return cudaMemset(region, 0, bytes) == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess ? "ok" : "error cudaMemset";
  if (cmd == "recvs" && w.size() == 3) {
    Status s = engine->post_recvs(num(w[1]), num(w[2]), [this](std::span<const uint8_t> m) {
      std::lock_guard lock(mu);
      message_hashes.push_back(testing::hash_hex(m.data(), m.size()) + ":" + std::to_string(m.size()));
      messages.fetch_add(1);
    });
    return s.ok() ? "ok" : "error " + s.to_string();
  }
  if (cmd == "messages" && w.size() == 3) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(num(w[2]));
    while (messages.load() < num(w[1]) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::lock_guard lock(mu);
    std::string out = messages.load() >= num(w[1]) ? "ok" : "timeout";
    for (const auto& h : message_hashes) out += " " + h;
    return out;
  }
  if (cmd == "send" && w.size() == 5) {
    auto addr = DomainAddress::from_hex(w[1]);
    if (!addr.ok()) return "error " + addr.status().to_string();
    CompletionCounter c;
    const uint64_t count = num(w[2]), len = num(w[3]);
    for (uint64_t i = 0; i < count; ++i) {
      std::vector<uint8_t> m(len);
      tools::fill_pattern(m.data(), len, num(w[4]) + i);
      auto id = engine->submit_send(*addr, m, Completion::counter(c));
      if (!id.ok()) return "error " + id.status().to_string();
    }
    if (!c.wait_for(count, std::chrono::seconds(60))) return "timeout";
    return c.errors == 0 ? "ok" : "errors " + std::to_string(c.errors.load());
  }
  if (cmd == "write_burst" && w.size() == 5) {  // from this GPU region into the desc's region
    auto desc = MrDesc::from_hex(w[1]);
    if (!desc.ok()) return "error " + desc.status().to_string();
    const uint64_t count = num(w[2]), chunk = num(w[3]);
    if (chunk == 0 || chunk > bytes || chunk > desc->length()) return "error chunk";
    if (!source.handle.valid()) {
      auto r = engine->register_memory(region, bytes, Access::kLocalOnly, MemoryKind::kCuda);
      if (!r.ok()) return "error " + r.status().to_string();
      source = *r;
    }
    burst_calls = std::vector<std::atomic<int>>(count);
    burst_outcomes.clear();
    const uint64_t slots = std::min<uint64_t>(bytes, desc->length()) / chunk;
    for (uint64_t i = 0; i < count; ++i) {
      const uint64_t off = (i % slots) * chunk;
      auto id = engine->submit_write({source.handle, off, *desc, off, chunk, static_cast<uint32_t>(num(w[4]))},
                                     Completion::callback([this, i](const Status& st) {
                                       burst_calls[i].fetch_add(1);
                                       std::lock_guard lock(mu);
                                       burst_outcomes[std::string(error_code_name(st.code()))]++;
                                     }));
      if (!id.ok()) return "error " + id.status().to_string();
    }
    return "ok";
  }
  if (cmd == "burst_status") {
    size_t finished = 0;
    bool once = true;
    for (auto& c : burst_calls) {
      finished += c.load() > 0;
      once = once && c.load() <= 1;
    }
    std::lock_guard lock(mu);
    std::string out = std::to_string(finished) + " " + (once ? "1" : "0");
    for (const auto& [code, n] : burst_outcomes) out += " " + code + "=" + std::to_string(n);
    return out;
  }
  if (cmd == "flag_check" && w.size() == 5) {
    const uint64_t n = num(w[2]), seed = num(w[3]), len = num(w[4]);
    if (len > bytes) return "error range";
    Result<MappedWord> word = alloc_mapped_word();
    if (!word.ok()) return "error " + word.status().to_string();
    flag = std::make_unique<MappedWord>(std::move(word).value());
    if (!result && cudaMalloc(reinterpret_cast<void**>(&result), 3 * sizeof(uint64_t)) != cudaSuccess) return "error cudaMalloc";
    if (!stream && cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) return "error stream";
    Status s = engine->imms().expect(static_cast<uint32_t>(num(w[1])), n, Completion::flag(flag->host_ptr(), 1, 2));
    if (!s.ok()) return "error " + s.to_string();
    const int e = launch_flag_then_check(flag->device_ptr(), 1, 2, 60'000'000'000ull, region, len, seed, result, stream);
    return e == 0 ? "ok" : std::string("error ") + error_text(e);
  }
  if (cmd == "flag_result") {
    if (!stream) return "error no flag_check";
    if (cudaStreamSynchronize(stream) != cudaSuccess) return "error kernel";
    uint64_t r[3] = {99, 0, 0};
    cudaMemcpy(r, result, sizeof(r), cudaMemcpyDeviceToHost);
    return std::to_string(r[0]) + " " + std::to_string(r[1]) + " " + std::to_string(r[2]);
  }
  if (cmd == "stop") {
    Status s = engine->stop();
    return s.ok() ? "ok" : "error " + s.to_string();
  }
  return "error unknown command '" + cmd + "'";
}

}  // namespace

int peer_gpu() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return 0;
  return count >= 2 ? 1 : 0;
}

int run_gpu_agent(int argc, char** argv) {
  // argv: <fd> <provider> <interfaces or -> <domains> <reorder_seed> <region_bytes> <stall_timeout_ms>
  if (argc != 7) {
    std::fprintf(stderr, "gpu agent: bad arguments\n");
    return 2;
  }
  tools::ControlChannel channel(std::atoi(argv[0]));
  testing::ProviderConfig config{"agent", argv[1], std::string(argv[2]) == "-" ? "" : argv[2],
                                 std::stoull(argv[3]), std::stoull(argv[4]), std::stoull(argv[6])};
  auto agent = std::make_unique<GpuAgent>();
  const int gpu = peer_gpu();
  if (cudaSetDevice(gpu) != cudaSuccess) {
    channel.send("error cudaSetDevice(" + std::to_string(gpu) + ")");
    return 1;
  }
  agent->bytes = std::stoull(argv[5]);
  if (cudaMalloc(reinterpret_cast<void**>(&agent->alloc), agent->bytes + kRegionOffset + 4096) != cudaSuccess) {
    channel.send("error cudaMalloc");
    return 1;
  }
  agent->region = agent->alloc + kRegionOffset;
  cudaMemset(agent->alloc, 0, agent->bytes + kRegionOffset + 4096);
  cudaDeviceSynchronize();
  auto engine = config.builder().build();
  if (!engine.ok()) {
    channel.send("error " + engine.status().to_string());
    return 1;
  }
  agent->engine = std::move(engine).value();
  auto reg = agent->engine->register_memory(agent->region, agent->bytes, Access::kRemoteWrite, MemoryKind::kCuda);
  if (!reg.ok()) {
    channel.send("error " + reg.status().to_string());
    return 1;
  }
  agent->reg = *reg;
  channel.send("hello " + agent->engine->main_address().to_hex() + " " + agent->reg.desc.to_hex());
  while (true) {
    auto line = channel.recv(std::chrono::minutes(10));
    if (!line || *line == "exit") break;
    auto words = tools::split_words(*line);
    channel.send(words.empty() ? "error empty" : agent->handle(words));
  }
  agent.reset();
  return 0;
}

}  // namespace fabric_lib::device_tests

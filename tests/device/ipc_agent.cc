#include "ipc_agent.h"

#include <cuda_runtime_api.h>

#include <memory>

#include "kernels.h"
#include "support/agent.h"

namespace fabric_lib::device_tests {
namespace {

// The region starts this far into its allocation: 16-byte aligned, not page aligned.
constexpr size_t kRegionOffset = 12544;

// The state of flag_check / flag_result, alive for the whole agent process.
struct FlagCheck {
  std::unique_ptr<MappedWord> flag;
  uint64_t* result = nullptr;
  cudaStream_t stream = nullptr;
  // Before the region goes: a kernel still waiting gives up (error value) and ends.
  void finish() {
    if (!stream) return;
    if (flag) flag->store(2);
    cudaStreamSynchronize(stream);
  }
  ~FlagCheck() {
    finish();
    if (stream) cudaStreamDestroy(stream);
    cudaFree(result);
  }
};

std::vector<testing::Agent::Command> flag_commands(std::shared_ptr<FlagCheck> f) {
  using testing::parse_u64;
  return {
      {"flag_check", 5,
       [f](testing::Agent& a, const testing::Agent::Words& w) -> std::string {
         const uint64_t n = parse_u64(w[2]), seed = parse_u64(w[3]), len = parse_u64(w[4]);
         if (len > a.region().size()) return "error range";
         Result<MappedWord> word = alloc_mapped_word();
         if (!word.ok()) return "error " + word.status().to_string();
         f->flag = std::make_unique<MappedWord>(std::move(word).value());
         if (!f->result && cudaMalloc(reinterpret_cast<void**>(&f->result), 3 * sizeof(uint64_t)) != cudaSuccess) {
           return "error cudaMalloc";
         }
         if (!f->stream && cudaStreamCreateWithFlags(&f->stream, cudaStreamNonBlocking) != cudaSuccess) {
           return "error stream";
         }
         Status s = a.engine().imms().expect(static_cast<uint32_t>(parse_u64(w[1])), n,
                                             Completion::flag(f->flag->host_ptr(), 1, 2));
         if (!s.ok()) return "error " + s.to_string();
         const int e = launch_flag_then_check(f->flag->device_ptr(), 1, 2, 60'000'000'000ull, a.region().data(), len,
                                              seed, f->result, f->stream);
         return e == 0 ? "ok" : std::string("error ") + error_text(e);
       }},
      {"flag_result", 1,
       [f](testing::Agent&, const testing::Agent::Words&) -> std::string {
         if (!f->stream) return "error no flag_check";
         if (cudaStreamSynchronize(f->stream) != cudaSuccess) return "error kernel";
         uint64_t r[3] = {99, 0, 0};
         cudaMemcpy(r, f->result, sizeof(r), cudaMemcpyDeviceToHost);
         return std::to_string(r[0]) + " " + std::to_string(r[1]) + " " + std::to_string(r[2]);
       }},
  };
}

}  // namespace

int run_gpu_agent(int argc, char** argv) {
  auto flags = std::make_shared<FlagCheck>();
  testing::AgentSetup setup;
  setup.make_region = [](size_t bytes) { return tools::make_cuda_region(bytes, peer_gpu(), kRegionOffset); };
  setup.extra_commands = flag_commands(flags);
  setup.before_exit = [flags] { flags->finish(); };
  return testing::run_agent(argc, argv, setup);
}

}  // namespace fabric_lib::device_tests

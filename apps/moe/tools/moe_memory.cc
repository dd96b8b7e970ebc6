// moe_memory: prints the buffer sizes one rank allocates for a configuration (the memory formula
// of docs/moe.md), e.g.
//   moe_memory tokens=128 experts=256 topk=8 hidden=7168 scales=56 dtype=fp8 world=8
// Options: tokens experts topk hidden scales dtype(fp8|bf16|fp32) out(bf16|fp32) world private
// overflow padding path(proxy|direct). Exit status 2 when the configuration is invalid.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "fabric_lib/moe/config.h"

using namespace fabric_lib::moe;

int main(int argc, char** argv) {
  std::map<std::string, std::string> a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    const size_t eq = s.find('=');
    if (eq != std::string::npos) a[s.substr(0, eq)] = s.substr(eq + 1);
  }
  auto num = [&](const char* k, uint64_t d) { return a.count(k) ? std::strtoull(a[k].c_str(), nullptr, 0) : d; };
  auto dt = [&](const char* k, const char* d) {
    const std::string v = a.count(k) ? a[k] : d;
    return v == "fp8" ? DType::kFp8E4M3 : v == "fp32" ? DType::kFp32 : DType::kBf16;
  };
  MoeConfig c;
  c.max_num_tokens = static_cast<uint32_t>(num("tokens", 128));
  c.num_experts = static_cast<uint32_t>(num("experts", 256));
  c.experts_per_token = static_cast<uint32_t>(num("topk", 8));
  c.hidden_dim = static_cast<uint32_t>(num("hidden", 7168));
  c.hidden_dim_scale = static_cast<uint32_t>(num("scales", 56));
  c.in_dtype = dt("dtype", "fp8");
  c.out_dtype = dt("out", "bf16");
  c.world_size = static_cast<uint32_t>(num("world", 8));
  c.max_private_tokens = static_cast<uint32_t>(num("private", kAuto));
  c.overflow_tokens = static_cast<uint32_t>(num("overflow", kAuto));
  c.expert_padding = static_cast<uint32_t>(num("padding", 1));
  c.path = a.count("path") && a["path"] == "direct" ? Path::kDirect : Path::kProxy;
  fabric_lib::Status s = c.validate();
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.to_string().c_str());
    return 2;
  }
  const Geometry g = Geometry::from(c);
  std::printf("%s\n%s", c.to_string().c_str(), BufferPlan::from(g).describe(g).c_str());
  return 0;
}

// Published model configurations and the cluster layouts of the planner benchmark: metadata for
// every trainer rank (PP x EP x FSDP) and every inference rank (instances of EP ranks, fp8),
// generated the way the ranks themselves would describe their shards.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fabric_lib/weights/weights.h"

namespace fabric_lib::weights::bench {

// The fields of a DeepSeek-V3-architecture config.json that fix the parameter shapes. Values are
// written from the public Hugging Face config.json files of deepseek-ai/DeepSeek-V3 and
// moonshotai/Kimi-K2-Instruct (from memory of those files, not downloaded here).
struct ModelConfig {
  std::string name;
  uint64_t hidden, intermediate, moe_intermediate, layers, first_dense, experts, shared_experts;
  uint64_t heads, q_lora_rank, kv_lora_rank, qk_nope, qk_rope, v_head, vocab;
};
ModelConfig deepseek_v3();
ModelConfig kimi_k2();

struct ClusterConfig {
  uint32_t pp = 2, ep = 8, fsdp = 16;  // trainers = pp * ep * fsdp
  bool dense_over_ep = false;          // dense parameters FSDP over ep * fsdp ranks (else HSDP: fsdp, replicated over ep)
  uint32_t inference = 128, infer_ep = 32;  // instances = inference / infer_ep
  uint32_t infer_dense_tp = 1;         // TP of dense tensors inside an instance (1: replicated, DP attention)
  uint32_t domains = 1;
};

struct Metadata {
  std::vector<TrainerMetadata> trainers;
  std::vector<InferenceMetadata> inference;
  uint64_t parameters = 0;  // elements of the model
};
Result<Metadata> make_metadata(const ModelConfig& m, const ClusterConfig& c);

}  // namespace fabric_lib::weights::bench

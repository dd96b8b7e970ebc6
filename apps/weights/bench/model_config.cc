#include "model_config.h"

#include <map>

namespace fabric_lib::weights::bench {

ModelConfig deepseek_v3() { return {"DeepSeek-V3", 7168, 18432, 2048, 61, 3, 256, 1, 128, 1536, 512, 128, 64, 128, 129280}; }
ModelConfig kimi_k2() { return {"Kimi-K2", 7168, 18432, 2048, 61, 1, 384, 1, 64, 1536, 512, 128, 64, 128, 163840}; }

namespace {

struct Param {
  std::string name;
  std::vector<uint64_t> shape;
  DType dtype;
  int layer;      // -1: embeddings (stage 0), -2: final norm and lm_head (last stage)
  int64_t expert; // -1: dense
};

// HF-style trainer names of every parameter (the MTP layer is left out, as inference engines do).
std::vector<Param> parameters(const ModelConfig& m) {
  std::vector<Param> v;
  const uint64_t H = m.hidden;
  v.push_back({"model.embed_tokens.weight", {m.vocab, H}, DType::kBf16, -1, -1});
  v.push_back({"model.norm.weight", {H}, DType::kBf16, -2, -1});
  v.push_back({"lm_head.weight", {m.vocab, H}, DType::kBf16, -2, -1});
  for (uint64_t l = 0; l < m.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const int L = static_cast<int>(l);
    auto add = [&](const std::string& n, std::vector<uint64_t> s, int64_t e = -1, DType t = DType::kBf16) {
      v.push_back({p + n, std::move(s), t, L, e});
    };
    add("input_layernorm.weight", {H});
    add("post_attention_layernorm.weight", {H});
    add("self_attn.q_a_proj.weight", {m.q_lora_rank, H});
    add("self_attn.q_a_layernorm.weight", {m.q_lora_rank});
    add("self_attn.q_b_proj.weight", {m.heads * (m.qk_nope + m.qk_rope), m.q_lora_rank});
    add("self_attn.kv_a_proj_with_mqa.weight", {m.kv_lora_rank + m.qk_rope, H});
    add("self_attn.kv_a_layernorm.weight", {m.kv_lora_rank});
    add("self_attn.kv_b_proj.weight", {m.heads * (m.qk_nope + m.v_head), m.kv_lora_rank});
    add("self_attn.o_proj.weight", {H, m.heads * m.v_head});
    if (l < m.first_dense) {
      add("mlp.gate_proj.weight", {m.intermediate, H});
      add("mlp.up_proj.weight", {m.intermediate, H});
      add("mlp.down_proj.weight", {H, m.intermediate});
      continue;
    }
    add("mlp.gate.weight", {m.experts, H});
    add("mlp.gate.e_score_correction_bias", {m.experts}, -1, DType::kF32);
    const uint64_t si = m.moe_intermediate * m.shared_experts;
    add("mlp.shared_experts.gate_proj.weight", {si, H});
    add("mlp.shared_experts.up_proj.weight", {si, H});
    add("mlp.shared_experts.down_proj.weight", {H, si});
    for (uint64_t e = 0; e < m.experts; ++e) {
      const std::string x = "mlp.experts." + std::to_string(e) + ".";
      add(x + "gate_proj.weight", {m.moe_intermediate, H}, static_cast<int64_t>(e));
      add(x + "up_proj.weight", {m.moe_intermediate, H}, static_cast<int64_t>(e));
      add(x + "down_proj.weight", {H, m.moe_intermediate}, static_cast<int64_t>(e));
    }
  }
  return v;
}

uint32_t stage_of(const Param& p, const ModelConfig& m, uint32_t pp) {
  if (p.layer == -1) return 0;
  if (p.layer == -2) return pp - 1;
  const uint64_t per = (m.layers + pp - 1) / pp;
  return static_cast<uint32_t>(p.layer / per);
}

DomainAddress address(const std::string& who) {
  std::vector<uint8_t> b(who.begin(), who.end());
  return *DomainAddress::from_bytes(b);
}

MrDesc desc(const std::string& who, uint32_t domains) {
  std::vector<MrDomainEntry> e;
  for (uint32_t d = 0; d < domains; ++d) e.push_back({address(who + "/" + std::to_string(d)), 1 + d, 0, {}});
  return *MrDesc::create(TransportKind::kLibfabric, MemoryKind::kCuda, 0, 1ull << 50, Access::kRemoteWrite, e);
}

bool quantized(const std::string& n) {  // what the fp8 checkpoints quantize: the layers' linear weights
  return n.find("model.layers.") == 0 && n.find("_proj") != std::string::npos && n.find("layernorm") == std::string::npos;
}

}  // namespace

Result<Metadata> make_metadata(const ModelConfig& m, const ClusterConfig& c) {
  Metadata md;
  const std::vector<Param> params = parameters(m);
  std::map<std::string, const Param*> by_name;
  for (const Param& p : params) {
    by_name[p.name] = &p;
    uint64_t n = 1;
    for (uint64_t d : p.shape) n *= d;
    md.parameters += n;
  }
  // --- trainers: rank = stage * (ep * fsdp) + ep_rank * fsdp + fsdp_rank -------------------------
  const uint32_t per_stage = c.ep * c.fsdp, T = c.pp * per_stage;
  if (m.experts % c.ep != 0) return invalid_argument("experts do not split over the trainer EP");
  md.trainers.resize(T);
  for (uint32_t r = 0; r < T; ++r) {
    md.trainers[r] = TrainerMetadata{r, T, address("t" + std::to_string(r)), c.domains, {}};
  }
  for (const Param& p : params) {
    const uint32_t stage = stage_of(p, m, c.pp);
    for (uint32_t e = 0; e < c.ep; ++e) {
      if (p.expert >= 0 && static_cast<uint64_t>(p.expert) / (m.experts / c.ep) != e) continue;
      for (uint32_t f = 0; f < c.fsdp; ++f) {
        TrainerPlacement pl;
        if (p.expert < 0 && c.dense_over_ep) {
          pl.fsdp_size = per_stage;
          pl.fsdp_rank = e * c.fsdp + f;
        } else {
          pl.fsdp_size = c.fsdp;
          pl.fsdp_rank = f;
        }
        Result<Box> b = trainer_box(p.name, p.shape, pl);
        if (!b.ok()) return b.status();
        if (b->empty()) continue;
        TrainerMetadata& t = md.trainers[stage * per_stage + e * c.fsdp + f];
        const uint64_t off = t.shards.empty() ? 0 : t.shards.back().offset + t.shards.back().box.elements() * element_size(t.shards.back().dtype) + 64;
        t.shards.push_back({p.name, p.shape, p.dtype, *b, 0, off});
      }
    }
  }
  // --- inference: instances of infer_ep ranks; experts EP, dense TP infer_dense_tp (or replicated)
  if (c.inference % c.infer_ep != 0 || m.experts % c.infer_ep != 0 || c.infer_ep % c.infer_dense_tp != 0) {
    return invalid_argument("inference layout does not divide");
  }
  NameMapping map;
  map.rename("lm_head.", "lm_head.");
  map.fuse("fused_qkv_a_proj.weight", {"q_a_proj.weight", "kv_a_proj_with_mqa.weight"});
  map.fuse("gate_up_proj.weight", {"gate_proj.weight", "up_proj.weight"});
  md.inference.resize(c.inference);
  for (uint32_t r = 0; r < c.inference; ++r) {
    InferenceMetadata& im = md.inference[r];
    im = InferenceMetadata{r, c.inference, address("i" + std::to_string(r)), c.domains,
                           {desc("i" + std::to_string(r) + "d", c.domains), desc("i" + std::to_string(r) + "s", c.domains)}, {}};
    const uint32_t local = r % c.infer_ep, tp = c.infer_dense_tp, tp_rank = local % tp;
    uint64_t data = 0, scales = 0;
    auto add = [&](Result<InferenceTensor> t) -> Status {
      if (!t.ok()) return t.status();
      t->region = 0;
      t->offset = data;
      data += (t->bytes() + 255) & ~uint64_t{255};
      if (t->dtype == DType::kFp8E4m3) {
        t->scale_region = 1;
        t->scale_offset = scales;
        scales += (t->scale_bytes() + 255) & ~uint64_t{255};
      }
      im.tensors.push_back(std::move(*t));
      return ok_status();
    };
    auto slices = [&](const std::string& inference_name) {
      std::vector<SourceSlice> v;
      for (const std::string& s : map.sources_of(inference_name)) v.push_back({s, whole(by_name.at(s)->shape)});
      return v;
    };
    auto dtype_of = [&](const std::string& n) { return quantized(n) ? DType::kFp8E4m3 : DType::kBf16; };
    // Dense tensors (fused where vLLM fuses them); column-parallel ones split rows, o/down split columns.
    std::vector<std::pair<std::string, TpSplit>> dense = {{"model.embed_tokens.weight", TpSplit::kRows},
                                                          {"model.norm.weight", TpSplit::kReplicated},
                                                          {"lm_head.weight", TpSplit::kRows}};
    for (uint64_t l = 0; l < m.layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      for (const char* n : {"input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_a_layernorm.weight",
                            "self_attn.kv_a_layernorm.weight", "self_attn.fused_qkv_a_proj.weight"}) {
        dense.push_back({p + n, TpSplit::kReplicated});
      }
      dense.push_back({p + "self_attn.q_b_proj.weight", TpSplit::kRows});
      dense.push_back({p + "self_attn.kv_b_proj.weight", TpSplit::kRows});
      dense.push_back({p + "self_attn.o_proj.weight", TpSplit::kCols});
      const std::string mlp = l < m.first_dense ? p + "mlp." : p + "mlp.shared_experts.";
      dense.push_back({mlp + "gate_up_proj.weight", TpSplit::kRows});
      dense.push_back({mlp + "down_proj.weight", TpSplit::kCols});
      if (l >= m.first_dense) {
        dense.push_back({p + "mlp.gate.weight", TpSplit::kReplicated});
        dense.push_back({p + "mlp.gate.e_score_correction_bias", TpSplit::kReplicated});
      }
    }
    for (const auto& [n, split] : dense) {
      const DType t = n.find("e_score") != std::string::npos ? DType::kF32 : dtype_of(n);
      FABRIC_LIB_RETURN_IF_ERROR(add(tp_tensor(n, slices(n), split, tp, tp_rank, t)));
    }
    Result<std::vector<uint64_t>> mine = ep_experts(m.experts, c.infer_ep, local);
    if (!mine.ok()) return mine.status();
    for (uint64_t l = m.first_dense; l < m.layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".mlp.experts.";
      std::vector<std::vector<SourceSlice>> w13, w2;
      for (uint64_t e : *mine) {
        const std::string x = p + std::to_string(e) + ".";
        w13.push_back(slices(x + "gate_up_proj.weight"));
        w2.push_back(slices(x + "down_proj.weight"));
      }
      FABRIC_LIB_RETURN_IF_ERROR(add(stacked_tensor(p + "w13_weight", w13, DType::kFp8E4m3)));
      FABRIC_LIB_RETURN_IF_ERROR(add(stacked_tensor(p + "w2_weight", w2, DType::kFp8E4m3)));
    }
  }
  return md;
}

}  // namespace fabric_lib::weights::bench

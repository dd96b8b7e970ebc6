#include "support/test_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

namespace fabric_lib::weights::testing {
namespace {

constexpr uint64_t kHidden = 256, kHeadDim = 128, kQHeads = 4, kKvHeads = 2, kDenseInter = 512;
constexpr uint64_t kExperts = 4, kMoeInter = 256, kVocab = 1000, kLayers = 2;

uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t name_hash(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (char c : s) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  return h;
}

const std::map<std::string, ModelParam>& params_by_name() {
  static const std::map<std::string, ModelParam> m = [] {
    std::map<std::string, ModelParam> out;
    auto add = [&](std::string n, std::vector<uint64_t> shape, DType t = DType::kBf16) {
      out[n] = ModelParam{n, std::move(shape), t};
    };
    add("model.embed_tokens.weight", {kVocab, kHidden});
    add("model.norm.weight", {kHidden}, DType::kF32);
    add("lm_head.weight", {kVocab, kHidden});
    for (uint64_t l = 0; l < kLayers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      add(p + "input_layernorm.weight", {kHidden}, DType::kF32);
      add(p + "post_attention_layernorm.weight", {kHidden}, DType::kF32);
      add(p + "self_attn.q_proj.weight", {kQHeads * kHeadDim, kHidden});
      add(p + "self_attn.k_proj.weight", {kKvHeads * kHeadDim, kHidden});
      add(p + "self_attn.v_proj.weight", {kKvHeads * kHeadDim, kHidden});
      add(p + "self_attn.o_proj.weight", {kHidden, kQHeads * kHeadDim});
      if (l == 0) {
        add(p + "mlp.gate_proj.weight", {kDenseInter, kHidden});
        add(p + "mlp.up_proj.weight", {kDenseInter, kHidden});
        add(p + "mlp.down_proj.weight", {kHidden, kDenseInter});
      } else {
        add(p + "mlp.gate.weight", {kExperts, kHidden});
        for (uint64_t e = 0; e < kExperts; ++e) {
          const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
          add(x + "gate_proj.weight", {kMoeInter, kHidden});
          add(x + "up_proj.weight", {kMoeInter, kHidden});
          add(x + "down_proj.weight", {kHidden, kMoeInter});
        }
      }
    }
    return out;
  }();
  return m;
}

uint64_t align64(uint64_t x) { return (x + 63) & ~uint64_t{63}; }

}  // namespace

std::vector<ModelParam> model_params() {
  std::vector<ModelParam> v;
  for (const auto& [n, p] : params_by_name()) v.push_back(p);
  return v;
}

NameMapping model_mapping() {
  NameMapping m;
  m.rename("lm_head.", "lm_head.");
  m.rename("", "model.");
  m.fuse("qkv_proj.weight", {"q_proj.weight", "k_proj.weight", "v_proj.weight"});
  m.fuse("gate_up_proj.weight", {"gate_proj.weight", "up_proj.weight"});
  return m;
}

float weight_value(const std::string& name, DType dtype, uint64_t r, uint64_t c, uint64_t step) {
  const uint64_t h = mix64(name_hash(name) ^ mix64(r * 0x10001 + c) ^ mix64(step + 77));
  const float mant = static_cast<float>(static_cast<int64_t>(h % 2001) - 1000) / 1000.0f;
  const int exp = static_cast<int>((r / 128 + c / 128 + step + (h >> 40) % 2) % 8) - 5;
  const float v = std::ldexp(mant, exp);
  return dtype == DType::kBf16 ? bf16_to_f32(f32_to_bf16(v)) : v;
}

TrainerLayout trainer_layout(uint32_t rank, uint32_t world) {
  TrainerLayout out;
  TrainerPlacement pl;
  pl.fsdp_size = world;
  pl.fsdp_rank = rank;
  for (const ModelParam& p : model_params()) {
    Result<Box> b = trainer_box(p.name, p.shape, pl);
    if (!b.ok() || b->empty()) continue;
    TrainerShard s{p.name, p.shape, p.dtype, *b, 0, out.arena_bytes};
    out.arena_bytes = align64(out.arena_bytes + b->elements() * element_size(p.dtype));
    out.shards.push_back(std::move(s));
  }
  return out;
}

namespace {
void store(uint8_t* p, DType t, float v) {
  if (t == DType::kBf16) {
    const uint16_t b = f32_to_bf16(v);
    std::memcpy(p, &b, 2);
  } else {
    std::memcpy(p, &v, 4);
  }
}
}  // namespace

void fill_trainer_arena(const TrainerLayout& layout, uint64_t step, uint8_t* arena) {
  for (const TrainerShard& s : layout.shards) {
    const size_t es = element_size(s.dtype);
    uint8_t* base = arena + s.offset;
    for (uint64_t r = s.box.r0; r < s.box.r1; ++r) {
      for (uint64_t c = s.box.c0; c < s.box.c1; ++c) {
        store(base + ((r - s.box.r0) * s.box.cols() + (c - s.box.c0)) * es, s.dtype, weight_value(s.name, s.dtype, r, c, step));
      }
    }
  }
}

InferenceLayout inference_layout(uint32_t rank, uint32_t world, bool fp8) {
  InferenceLayout out;
  const NameMapping map = model_mapping();
  const auto& params = params_by_name();
  auto slices = [&](const std::string& inference_name) {
    std::vector<SourceSlice> v;
    for (const std::string& s : map.sources_of(inference_name)) v.push_back({s, whole(params.at(s).shape)});
    return v;
  };
  const DType linear = fp8 ? DType::kFp8E4m3 : DType::kBf16;
  auto add = [&](Result<InferenceTensor> t) {
    if (t.ok()) out.tensors.push_back(std::move(*t));
  };
  add(tp_tensor("embed_tokens.weight", slices("embed_tokens.weight"), TpSplit::kRows, world, rank, DType::kBf16));
  add(tp_tensor("norm.weight", slices("norm.weight"), TpSplit::kReplicated, world, rank, DType::kBf16));
  add(tp_tensor("lm_head.weight", slices("lm_head.weight"), TpSplit::kRows, world, rank, linear));
  for (uint64_t l = 0; l < kLayers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    for (const char* n : {"input_layernorm.weight", "post_attention_layernorm.weight"}) {
      add(tp_tensor(p + n, slices(p + n), TpSplit::kReplicated, world, rank, DType::kBf16));
    }
    add(tp_tensor(p + "self_attn.qkv_proj.weight", slices(p + "self_attn.qkv_proj.weight"), TpSplit::kRows, world, rank, linear));
    add(tp_tensor(p + "self_attn.o_proj.weight", slices(p + "self_attn.o_proj.weight"), TpSplit::kCols, world, rank, linear));
    if (l == 0) {
      add(tp_tensor(p + "mlp.gate_up_proj.weight", slices(p + "mlp.gate_up_proj.weight"), TpSplit::kRows, world, rank, linear));
      add(tp_tensor(p + "mlp.down_proj.weight", slices(p + "mlp.down_proj.weight"), TpSplit::kCols, world, rank, linear));
      continue;
    }
    add(tp_tensor(p + "mlp.gate.weight", slices(p + "mlp.gate.weight"), TpSplit::kReplicated, world, rank, DType::kBf16));
    std::vector<std::vector<SourceSlice>> w13, w2;
    const std::vector<uint64_t> experts = *ep_experts(kExperts, world, rank);
    for (uint64_t e : experts) {
      const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
      w13.push_back(slices(x + "gate_up_proj.weight"));
      w2.push_back(slices(x + "down_proj.weight"));
    }
    add(stacked_tensor(p + "mlp.experts.w13_weight", w13, linear));
    add(stacked_tensor(p + "mlp.experts.w2_weight", w2, linear));
  }
  for (InferenceTensor& t : out.tensors) {
    t.region = 0;
    t.offset = out.data_bytes;
    out.data_bytes = align64(out.data_bytes + t.bytes());
    if (t.dtype == DType::kFp8E4m3) {
      t.scale_region = 1;
      t.scale_offset = out.scale_bytes;
      out.scale_bytes = align64(out.scale_bytes + t.scale_bytes());
    }
  }
  out.scale_bytes = std::max<uint64_t>(out.scale_bytes, 64);  // region 1 always exists
  return out;
}

void reference_load(const InferenceLayout& layout, uint64_t step, uint8_t* data, uint8_t* scales, uint8_t fill) {
  std::memset(data, fill, layout.data_bytes);
  std::memset(scales, fill, layout.scale_bytes);
  const auto& params = params_by_name();
  for (const InferenceTensor& t : layout.tensors) {
    std::vector<float> m(t.rows * t.cols);
    for (const DestPiece& p : t.pieces) {
      const DType st = params.at(p.source).dtype;
      for (uint64_t r = p.src.r0; r < p.src.r1; ++r) {
        for (uint64_t c = p.src.c0; c < p.src.c1; ++c) {
          m[(p.dst_row + r - p.src.r0) * t.cols + p.dst_col + c - p.src.c0] = weight_value(p.source, st, r, c, step);
        }
      }
    }
    uint8_t* out = data + t.offset;
    if (t.dtype == DType::kFp8E4m3) {
      const uint64_t sp = (t.cols + kFp8Block - 1) / kFp8Block;
      quantize_fp8_blocks_f32(m.data(), t.cols, t.rows, t.cols, out, t.cols, reinterpret_cast<float*>(scales + t.scale_offset), sp);
    } else {
      for (size_t i = 0; i < m.size(); ++i) store(out + i * element_size(t.dtype), t.dtype, m[i]);
    }
  }
}

}  // namespace fabric_lib::weights::testing

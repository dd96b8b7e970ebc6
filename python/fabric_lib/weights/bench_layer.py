"""One DeepSeek-V3 MoE layer for `python -m fabric_lib.weights.bench`: its trainer-side
parameters (names of the Hugging Face checkpoint, bf16 matrices, f32 norms and router bias) and
its inference-side layout as vLLM holds it in fp8 (fused_qkv_a_proj = q_a_proj + kv_a_proj_with_mqa,
shared experts' gate_up, the routed experts stacked as w13 / w2, all fp8 e4m3 with 128x128 block
scales; norms and the router bf16, the router bias f32)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Tuple

PREFIX = "model.layers.3."  # DeepSeek-V3's first MoE layer


@dataclass(frozen=True)
class Dims:
    hidden: int = 7168
    experts: int = 256
    moe_inter: int = 2048
    shared_experts: int = 1
    heads: int = 128
    q_lora: int = 1536
    kv_lora: int = 512
    qk_nope: int = 128
    qk_rope: int = 64
    v_head: int = 128


FULL = Dims()
SMALL = Dims(hidden=1024, experts=8, moe_inter=256, heads=4, q_lora=256, kv_lora=128)  # a CPU smoke run


@dataclass
class Dest:
    name: str
    rows: int
    cols: int
    dtype: str  # "fp8_e4m3", "bf16", "f32"
    parts: List[Tuple[str, int, int]] = field(default_factory=list)  # (source, rows, first destination row)

    def layout(self):
        return self.rows, self.cols, [(s, (0, r, 0, self.cols), row, 0) for s, r, row in self.parts]

    def scale_shape(self) -> Tuple[int, int]:
        return (self.rows + 127) // 128, (self.cols + 127) // 128


def trainer_params(d: Dims) -> Dict[str, Tuple[Tuple[int, ...], str]]:
    """name -> (global shape, trainer dtype)."""
    p, h, i = PREFIX, d.hidden, d.moe_inter
    out: Dict[str, Tuple[Tuple[int, ...], str]] = {
        p + "input_layernorm.weight": ((h,), "f32"),
        p + "self_attn.q_a_proj.weight": ((d.q_lora, h), "bf16"),
        p + "self_attn.q_a_layernorm.weight": ((d.q_lora,), "f32"),
        p + "self_attn.q_b_proj.weight": ((d.heads * (d.qk_nope + d.qk_rope), d.q_lora), "bf16"),
        p + "self_attn.kv_a_proj_with_mqa.weight": ((d.kv_lora + d.qk_rope, h), "bf16"),
        p + "self_attn.kv_a_layernorm.weight": ((d.kv_lora,), "f32"),
        p + "self_attn.kv_b_proj.weight": ((d.heads * (d.qk_nope + d.v_head), d.kv_lora), "bf16"),
        p + "self_attn.o_proj.weight": ((h, d.heads * d.v_head), "bf16"),
        p + "post_attention_layernorm.weight": ((h,), "f32"),
        p + "mlp.gate.weight": ((d.experts, h), "bf16"),
        p + "mlp.gate.e_score_correction_bias": ((d.experts,), "f32"),
        p + "mlp.shared_experts.gate_proj.weight": ((i * d.shared_experts, h), "bf16"),
        p + "mlp.shared_experts.up_proj.weight": ((i * d.shared_experts, h), "bf16"),
        p + "mlp.shared_experts.down_proj.weight": ((h, i * d.shared_experts), "bf16"),
    }
    for e in range(d.experts):
        out[p + f"mlp.experts.{e}.gate_proj.weight"] = ((i, h), "bf16")
        out[p + f"mlp.experts.{e}.up_proj.weight"] = ((i, h), "bf16")
        out[p + f"mlp.experts.{e}.down_proj.weight"] = ((h, i), "bf16")
    return out


def view2d(shape) -> Tuple[int, int]:
    if len(shape) == 1:
        return shape[0], 1
    rows = 1
    for x in shape[:-1]:
        rows *= x
    return rows, shape[-1]


def destinations(d: Dims) -> List[Dest]:
    params = trainer_params(d)
    p = PREFIX
    out: List[Dest] = []

    def add(name: str, dtype: str, sources: List[str]) -> None:
        cols = view2d(params[sources[0]][0])[1]
        dest = Dest(p + name, 0, cols, dtype)
        for s in sources:
            r, c = view2d(params[s][0])
            assert c == cols, f"{name}: {s} has {c} columns"
            dest.parts.append((s, r, dest.rows))
            dest.rows += r
        out.append(dest)

    add("input_layernorm.weight", "bf16", [p + "input_layernorm.weight"])
    add("self_attn.fused_qkv_a_proj.weight", "fp8_e4m3", [p + "self_attn.q_a_proj.weight", p + "self_attn.kv_a_proj_with_mqa.weight"])
    for n in ("q_a_layernorm", "kv_a_layernorm"):
        add(f"self_attn.{n}.weight", "bf16", [p + f"self_attn.{n}.weight"])
    for n in ("q_b_proj", "kv_b_proj", "o_proj"):
        add(f"self_attn.{n}.weight", "fp8_e4m3", [p + f"self_attn.{n}.weight"])
    add("post_attention_layernorm.weight", "bf16", [p + "post_attention_layernorm.weight"])
    add("mlp.gate.weight", "bf16", [p + "mlp.gate.weight"])
    add("mlp.gate.e_score_correction_bias", "f32", [p + "mlp.gate.e_score_correction_bias"])
    add("mlp.shared_experts.gate_up_proj.weight", "fp8_e4m3", [p + "mlp.shared_experts.gate_proj.weight", p + "mlp.shared_experts.up_proj.weight"])
    add("mlp.shared_experts.down_proj.weight", "fp8_e4m3", [p + "mlp.shared_experts.down_proj.weight"])
    add("mlp.experts.w13_weight", "fp8_e4m3",
        [p + f"mlp.experts.{e}.{x}_proj.weight" for e in range(d.experts) for x in ("gate", "up")])
    add("mlp.experts.w2_weight", "fp8_e4m3", [p + f"mlp.experts.{e}.down_proj.weight" for e in range(d.experts)])
    return out


def spot_checks(d: Dims) -> List[Tuple[str, str]]:
    """(destination, source) pairs the benchmark verifies byte for byte after its runs: the fused
    attention projection (its kv_a part holds blocks that straddle the trainers' boundary, so
    staged ones) and the first and last experts."""
    p = PREFIX
    e = d.experts - 1
    return [(p + "self_attn.fused_qkv_a_proj.weight", p + "self_attn.kv_a_proj_with_mqa.weight"),
            (p + "mlp.experts.w13_weight", p + "mlp.experts.0.up_proj.weight"),
            (p + "mlp.experts.w2_weight", p + f"mlp.experts.{e}.down_proj.weight")]

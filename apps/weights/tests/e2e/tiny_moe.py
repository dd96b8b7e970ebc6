"""The built-in model of the identical-logits test: a small decoder-only transformer with the
parameter names of a Hugging Face Qwen3-MoE checkpoint, written as one functional forward over a
dict of weight tensors, so that the trainer's full model (separate q/k/v, gate/up, per-expert
tensors) and the inference model (views into fused qkv / gate_up and stacked expert buffers) run
exactly the same operations on exactly the same values.

Layer 0 has a dense gated MLP, layer 1 a top-2 MoE over 4 experts. Attention: 4 query heads and
2 KV heads of 64 (GQA), rotary positions, causal softmax in f32. RMSNorm in f32. Every dimension
is a multiple of 128 where an fp8 destination needs one (fused pieces on the 128-row grid), and
the FSDP halves of k/v (64 rows) fall inside fp8 blocks, so fp8 destinations exercise the
trainers' staged blocks. Runs on torch 1.13 (CPU) and torch 2.x (CPU or CUDA).
"""
from __future__ import annotations

import math
from typing import Dict, Tuple

import torch
import torch.nn.functional as F

VOCAB, HIDDEN, HEADS, KV_HEADS, HEAD_DIM = 512, 256, 4, 2, 64
INTER, EXPERTS, TOP_K, MOE_INTER = 512, 4, 2, 128
LAYERS = 2  # layer 0 dense, layer 1 MoE
EPS = 1e-6


def parameter_shapes() -> Dict[str, Tuple[int, ...]]:
    """Trainer-side parameter names and global shapes, in model order."""
    p: Dict[str, Tuple[int, ...]] = {"model.embed_tokens.weight": (VOCAB, HIDDEN)}
    for i in range(LAYERS):
        pre = f"model.layers.{i}."
        p[pre + "input_layernorm.weight"] = (HIDDEN,)
        p[pre + "self_attn.q_proj.weight"] = (HEADS * HEAD_DIM, HIDDEN)
        p[pre + "self_attn.k_proj.weight"] = (KV_HEADS * HEAD_DIM, HIDDEN)
        p[pre + "self_attn.v_proj.weight"] = (KV_HEADS * HEAD_DIM, HIDDEN)
        p[pre + "self_attn.o_proj.weight"] = (HIDDEN, HEADS * HEAD_DIM)
        p[pre + "post_attention_layernorm.weight"] = (HIDDEN,)
        if i == 0:
            p[pre + "mlp.gate_proj.weight"] = (INTER, HIDDEN)
            p[pre + "mlp.up_proj.weight"] = (INTER, HIDDEN)
            p[pre + "mlp.down_proj.weight"] = (HIDDEN, INTER)
        else:
            p[pre + "mlp.gate.weight"] = (EXPERTS, HIDDEN)  # the router
            for e in range(EXPERTS):
                p[pre + f"mlp.experts.{e}.gate_proj.weight"] = (MOE_INTER, HIDDEN)
                p[pre + f"mlp.experts.{e}.up_proj.weight"] = (MOE_INTER, HIDDEN)
                p[pre + f"mlp.experts.{e}.down_proj.weight"] = (HIDDEN, MOE_INTER)
    p["model.norm.weight"] = (HIDDEN,)
    p["lm_head.weight"] = (VOCAB, HIDDEN)
    return p


def init_weights(shapes: Dict[str, Tuple[int, ...]], seed: int) -> Dict[str, torch.Tensor]:
    """Seeded f32 weights (CPU): matrices N(0, 1/fan_in), norm weights 1 + N(0, 0.1^2), the
    embedding N(0, 1). The same in every process (one generator per parameter)."""
    out = {}
    for index, (name, shape) in enumerate(shapes.items()):
        g = torch.Generator().manual_seed(seed * 100003 + index)
        if len(shape) == 1:
            out[name] = 1.0 + 0.1 * torch.randn(shape, generator=g)
        elif "embed_tokens" in name:
            out[name] = torch.randn(shape, generator=g)
        else:
            out[name] = torch.randn(shape, generator=g) / math.sqrt(shape[-1])
    return out


def _rms_norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)
    return xf.to(x.dtype) * w


def _rope(t: int, device, dtype) -> Tuple[torch.Tensor, torch.Tensor]:
    inv = 1.0 / (10000.0 ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float32, device=device) / HEAD_DIM))
    f = torch.arange(t, dtype=torch.float32, device=device)[:, None] * inv[None, :]
    emb = torch.cat([f, f], dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


def _attention(w: Dict[str, torch.Tensor], pre: str, h: torch.Tensor, cos, sin) -> torch.Tensor:
    b, t, _ = h.shape
    q = F.linear(h, w[pre + "q_proj.weight"]).view(b, t, HEADS, HEAD_DIM).transpose(1, 2)
    k = F.linear(h, w[pre + "k_proj.weight"]).view(b, t, KV_HEADS, HEAD_DIM).transpose(1, 2)
    v = F.linear(h, w[pre + "v_proj.weight"]).view(b, t, KV_HEADS, HEAD_DIM).transpose(1, 2)
    q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
    k = k.repeat_interleave(HEADS // KV_HEADS, dim=1)
    v = v.repeat_interleave(HEADS // KV_HEADS, dim=1)
    s = torch.matmul(q, k.transpose(-1, -2)).float() * (HEAD_DIM ** -0.5)
    mask = torch.full((t, t), float("-inf"), device=h.device).triu(1)
    p = torch.softmax(s + mask, dim=-1).to(h.dtype)
    o = torch.matmul(p, v).transpose(1, 2).reshape(b, t, HEADS * HEAD_DIM)
    return F.linear(o, w[pre + "o_proj.weight"])


def _gated(w: Dict[str, torch.Tensor], pre: str, x: torch.Tensor) -> torch.Tensor:
    return F.linear(F.silu(F.linear(x, w[pre + "gate_proj.weight"])) * F.linear(x, w[pre + "up_proj.weight"]),
                    w[pre + "down_proj.weight"])


def _moe(w: Dict[str, torch.Tensor], pre: str, h: torch.Tensor) -> torch.Tensor:
    flat = h.reshape(-1, HIDDEN)
    probs = torch.softmax(F.linear(flat, w[pre + "gate.weight"]).float(), dim=-1)
    top_w, top_i = torch.topk(probs, TOP_K, dim=-1)
    top_w = (top_w / top_w.sum(-1, keepdim=True)).to(h.dtype)
    out = torch.zeros(flat.shape, dtype=torch.float32, device=h.device)
    for e in range(EXPERTS):
        rows, slot = (top_i == e).nonzero(as_tuple=True)
        if rows.numel() == 0:
            continue
        y = _gated(w, pre + f"experts.{e}.", flat[rows]) * top_w[rows, slot, None]
        out.index_add_(0, rows, y.float())  # rows are distinct within one expert
    return out.to(h.dtype).view(h.shape)


def forward(w: Dict[str, torch.Tensor], tokens: torch.Tensor) -> torch.Tensor:
    """Logits (f32, [batch, tokens, vocab]) of `tokens` under the weights `w` (name -> tensor of
    the parameter's shape, all of one dtype, on the tokens' device)."""
    x = F.embedding(tokens, w["model.embed_tokens.weight"])
    cos, sin = _rope(tokens.shape[1], tokens.device, x.dtype)
    for i in range(LAYERS):
        pre = f"model.layers.{i}."
        x = x + _attention(w, pre + "self_attn.", _rms_norm(x, w[pre + "input_layernorm.weight"]), cos, sin)
        h = _rms_norm(x, w[pre + "post_attention_layernorm.weight"])
        x = x + (_gated(w, pre + "mlp.", h) if i == 0 else _moe(w, pre + "mlp.", h))
    return F.linear(_rms_norm(x, w["model.norm.weight"]), w["lm_head.weight"]).float()


class Runner:
    """The model as a process runs it: load(weights) takes the tensors as they are (views into
    destination buffers stay views), logits(tokens) runs the forward."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.w: Dict[str, torch.Tensor] = {}

    def load(self, weights: Dict[str, torch.Tensor]) -> None:
        self.w = dict(weights)

    @torch.no_grad()
    def logits(self, tokens: torch.Tensor) -> torch.Tensor:
        return forward(self.w, tokens.to(self.device))


class Spec:
    """What the harness needs of a model (the transformers adapter has the same interface)."""

    name = "builtin"
    vocab = VOCAB

    def __init__(self) -> None:
        self._shapes = parameter_shapes()

    def shapes(self) -> Dict[str, Tuple[int, ...]]:
        return dict(self._shapes)

    def init_weights(self, seed: int) -> Dict[str, torch.Tensor]:
        return init_weights(self._shapes, seed)

    def runner(self, device: str) -> Runner:
        return Runner(device)

"""The inference side's parameter layout for the identical-logits test, derived from the
trainer-side parameter list the way vLLM lays out a Qwen3-MoE / DeepSeek-style model:

* q_proj, k_proj, v_proj of one attention -> one fused `qkv_proj.weight` (rows stacked);
* gate_proj, up_proj of one dense MLP -> one fused `gate_up_proj.weight`;
* experts.{e}.gate_proj/up_proj/down_proj of one MoE -> stacked `experts.w13_weight` (per expert:
  gate rows, then up rows) and `experts.w2_weight` (down), vLLM FusedMoE's buffers;
* everything else (embeddings, norms, router, lm_head, 3-D fused expert tensors) as it is.

An fp8 instance stores the linear weights (names with "_proj" or ".experts.") as fp8 e4m3 with
128x128 block scales when every piece sits on the 128-row grid (the app's rule); the rest stays
bf16. Also here: the expected destination contents from full trainer weights (the app's CPU
references: round-to-nearest-even bf16, weights.quantize_fp8), fp8 dequantization, and the
mapping from destination buffers back to per-parameter tensors (views for bf16).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, List, Sequence, Tuple

import numpy as np
import torch

from fabric_lib import weights

BLOCK = 128


@dataclass
class Dest:
    name: str
    rows: int
    cols: int
    fp8: bool
    parts: List[Tuple[str, int, int]] = field(default_factory=list)  # (source, its 2-D rows, first destination row)

    def layout(self):
        """(rows, cols, pieces) for InferenceEndpoint.add_tensor."""
        return self.rows, self.cols, [(s, (0, r, 0, self.cols), row, 0) for s, r, row in self.parts]

    def scale_shape(self) -> Tuple[int, int]:
        return (self.rows + BLOCK - 1) // BLOCK, (self.cols + BLOCK - 1) // BLOCK


def view2d(shape: Sequence[int]) -> Tuple[int, int]:
    if len(shape) == 1:
        return int(shape[0]), 1
    rows = 1
    for d in shape[:-1]:
        rows *= int(d)
    return rows, int(shape[-1])


def _is_linear(name: str, shape: Sequence[int]) -> bool:
    return len(shape) >= 2 and ("_proj" in name or ".experts." in name) and "embed" not in name and "lm_head" not in name


_EXPERT = re.compile(r"^(.*\.experts)\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")


def plan(shapes: Dict[str, Tuple[int, ...]], fp8_instance: bool) -> List[Dest]:
    """The destination tensors of one inference instance (one rank holding the whole model)."""
    used, dests = set(), []

    def add(name: str, sources: List[str]) -> None:
        cols = view2d(shapes[sources[0]])[1]
        d = Dest(name, 0, cols, False)
        for s in sources:
            r, c = view2d(shapes[s])
            assert c == cols, f"{name}: {s} has {c} columns, not {cols}"
            d.parts.append((s, r, d.rows))
            d.rows += r
            used.add(s)
        on_grid = all(row % BLOCK == 0 and ((row + r) % BLOCK == 0 or row + r == d.rows) for _, r, row in d.parts)
        d.fp8 = fp8_instance and on_grid and all(_is_linear(s, shapes[s]) for s in sources)
        dests.append(d)

    experts: Dict[str, Dict[int, Dict[str, str]]] = {}
    for n in shapes:
        m = _EXPERT.match(n)
        if m:
            experts.setdefault(m.group(1), {}).setdefault(int(m.group(2)), {})[m.group(3)] = n
    for prefix, by_index in experts.items():
        order = sorted(by_index)
        if all(set(by_index[e]) == {"gate_proj", "up_proj", "down_proj"} for e in order):
            add(prefix + ".w13_weight", [by_index[e][p] for e in order for p in ("gate_proj", "up_proj")])
            add(prefix + ".w2_weight", [by_index[e]["down_proj"] for e in order])
    for n in shapes:
        if n in used:
            continue
        if n.endswith(".q_proj.weight"):
            p = n[: -len("q_proj.weight")]
            if p + "k_proj.weight" in shapes and p + "v_proj.weight" in shapes:
                add(p + "qkv_proj.weight", [n, p + "k_proj.weight", p + "v_proj.weight"])
                continue
        if n.endswith(".gate_proj.weight"):
            p = n[: -len("gate_proj.weight")]
            if p + "up_proj.weight" in shapes:
                add(p + "gate_up_proj.weight", [n, p + "up_proj.weight"])
                continue
    for n in shapes:
        if n not in used:
            add(n, [n])
    return dests


# --- references -------------------------------------------------------------------------------------

def bf16_bits(x: torch.Tensor) -> np.ndarray:
    """A bf16 (or f32, uint8) tensor's elements as unsigned integers (bit patterns), on the CPU."""
    x = x.detach().cpu().contiguous()
    if x.dtype == torch.bfloat16:
        return x.view(torch.int16).numpy().view(np.uint16)
    if x.dtype == torch.float32:
        return x.numpy().view(np.uint32)
    return x.numpy()


def stacked_f32(d: Dest, full: Dict[str, torch.Tensor]) -> torch.Tensor:
    """The destination's rows from full trainer weights (any float dtype), widened to f32 exactly."""
    return torch.cat([full[s].detach().cpu().float().reshape(r, d.cols) for s, r, _ in d.parts], dim=0)


def expected(d: Dest, full: Dict[str, torch.Tensor]):
    """What the destination must hold after a transfer of `full`: a bf16 tensor, or (fp8 bytes
    uint8, scales f32) from the CPU reference quantization."""
    x = stacked_f32(d, full)
    if not d.fp8:
        return x.to(torch.bfloat16)  # round to nearest even, as the trainers' cast
    q, s = weights.quantize_fp8(x.numpy())
    return torch.from_numpy(q), torch.from_numpy(s)


def _e4m3fn_table() -> torch.Tensor:
    """f32 value of every e4m3fn byte (bias 7, no infinities, 0x7f/0xff NaN)."""
    v = np.zeros(256, np.float32)
    for b in range(256):
        sign = -1.0 if b & 0x80 else 1.0
        e, m = (b >> 3) & 0xF, b & 7
        if e == 0xF and m == 7:
            v[b] = np.nan
        elif e == 0:
            v[b] = sign * (m / 8.0) * 2.0 ** -6
        else:
            v[b] = sign * (1.0 + m / 8.0) * 2.0 ** (e - 7)
    return torch.from_numpy(v)


E4M3FN = _e4m3fn_table()


def dequantize(q: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """bf16 of e4m3fn(q) * scale of its 128x128 block (f32 product, then round to nearest even)."""
    rows, cols = q.shape
    scale = s.repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)[:rows, :cols]
    return (E4M3FN.to(q.device)[q.long()] * scale).to(torch.bfloat16)


def model_weights(dests: List[Dest], buffers: Dict[str, object], shapes: Dict[str, Tuple[int, ...]]) -> Dict[str, torch.Tensor]:
    """Per-parameter bf16 tensors of the model from destination buffers: views into bf16
    buffers (the model runs on the transferred memory itself), dequantized copies of fp8 ones."""
    out = {}
    for d in dests:
        b = buffers[d.name]
        full = dequantize(*b) if d.fp8 else b
        for s, r, row in d.parts:
            out[s] = full[row:row + r].view(shapes[s])
    return out

"""A torch model of the MoE layer for the tests: deterministic global batches, the expert function
(a per-expert scale of the token, so combine has a closed form), and reference dispatch/combine.

Inputs depend only on (seed, step, global token), so one global batch split over any number of
ranks must give bit-identical combine outputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


def fp8_table() -> torch.Tensor:
    """float32 value of every fp8 e4m3fn byte (NaN for 0x7f / 0xff)."""
    vals = []
    for b in range(256):
        sign, exp, man = b >> 7, (b >> 3) & 0xF, b & 7
        if exp == 0xF and man == 7:
            v = math.nan
        elif exp == 0:
            v = math.ldexp(man / 8.0, -6)
        else:
            v = math.ldexp(1.0 + man / 8.0, exp - 7)
        vals.append(-v if sign else v)
    return torch.tensor(vals, dtype=torch.float32)


_FP8 = fp8_table()


@dataclass
class Shape:
    experts: int
    top_k: int
    hidden: int
    scales: int  # per-128 scales (0: none)
    in_dtype: torch.dtype  # torch.uint8 carries fp8 bytes
    out_dtype: torch.dtype = torch.bfloat16


@dataclass
class Batch:
    x: torch.Tensor
    scales: torch.Tensor | None
    indices: torch.Tensor  # int32 [T, K]
    weights: torch.Tensor  # float32 [T, K]


def global_batch(shape: Shape, seed: int, step: int, tokens: int) -> Batch:
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    if shape.in_dtype == torch.uint8:
        x = torch.randint(0, 256, (tokens, shape.hidden), generator=g, dtype=torch.uint8)
        nan = (x & 0x7F) == 0x7F
        x[nan] ^= 1
    else:
        x = (torch.rand(tokens, shape.hidden, generator=g) * 4 - 2).to(shape.in_dtype)
    scales = torch.rand(tokens, shape.scales, generator=g) * 1.5 + 0.5 if shape.scales else None
    kind = step % 3
    if kind == 1:  # every token to the same experts: one rank gets everything
        hot = (step * 5) % shape.experts
        idx = (torch.arange(shape.top_k) + hot) % shape.experts
        indices = idx.repeat(tokens, 1)
    elif kind == 2:  # only every fourth expert: most experts get nothing
        pool = torch.arange(0, shape.experts, 4)
        if pool.numel() < shape.top_k:
            pool = torch.arange(shape.experts)
        perm = torch.rand(tokens, pool.numel(), generator=g).argsort(dim=1)[:, : shape.top_k]
        indices = pool[perm]
    else:
        indices = torch.rand(tokens, shape.experts, generator=g).argsort(dim=1)[:, : shape.top_k]
    w = torch.rand(tokens, shape.top_k, generator=g) + 0.05
    w = w / w.sum(dim=1, keepdim=True)
    return Batch(x.contiguous(), scales, indices.to(torch.int32).contiguous(), w.contiguous())


def slice_batch(b: Batch, first: int, count: int) -> Batch:
    s = slice(first, first + count)
    return Batch(
        b.x[s].contiguous(),
        b.scales[s].contiguous() if b.scales is not None else None,
        b.indices[s].contiguous(),
        b.weights[s].contiguous(),
    )


def values(shape: Shape, x: torch.Tensor, scales: torch.Tensor | None) -> torch.Tensor:
    v = _FP8[x.long()] if shape.in_dtype == torch.uint8 else x.float()
    if scales is not None:
        v = v * scales.repeat_interleave(shape.hidden // shape.scales, dim=1)
    return v


def expert(shape: Shape, e: torch.Tensor, x: torch.Tensor, scales: torch.Tensor | None) -> torch.Tensor:
    """y = value(x) * (1 + (e % 7) / 8), rounded to the output dtype; e has one entry per row."""
    factor = 1.0 + (e % 7).float() / 8.0
    return (values(shape, x, scales) * factor[:, None]).to(shape.out_dtype)


def reference_dispatch(shape: Shape, rank: int, world: int, batches: list[Batch], padding: int):
    """(counts, [(pad_offset, rows x, rows scales)] per local expert) for `rank`."""
    local = shape.experts // world
    out = []
    counts = []
    offset = 0
    for e in range(local):
        ge = rank * local + e
        xs, ss = [], []
        for b in batches:  # by source rank, then token order
            hit = (b.indices == ge).any(dim=1)
            xs.append(b.x[hit])
            if b.scales is not None:
                ss.append(b.scales[hit])
        x = torch.cat(xs)
        counts.append(x.shape[0])
        out.append((offset, x, torch.cat(ss) if ss else None))
        offset += (x.shape[0] + padding - 1) // padding * padding
    return counts, out


def reference_combine(shape: Shape, b: Batch) -> torch.Tensor:
    """The closed form: sum_k w[:, k] * expert(e_k, x) in fp32, k in order, then the output dtype."""
    acc = torch.zeros(b.x.shape[0], shape.hidden, dtype=torch.float32)
    for k in range(shape.top_k):
        y = expert(shape, b.indices[:, k], b.x, b.scales).float()
        acc = acc + b.weights[:, k : k + 1] * y
    return acc.to(shape.out_dtype)


def bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bits of a tensor, for exact comparisons."""
    return t.view(torch.int16) if t.element_size() == 2 else (t.view(torch.int32) if t.element_size() == 4 else t)

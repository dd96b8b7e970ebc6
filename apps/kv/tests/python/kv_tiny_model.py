"""A small real attention model for the KV-transfer end-to-end tests: multi-layer, GQA (8 query
heads over 4 KV heads), RoPE, RMSNorm, a gated MLP, greedy decoding, seeded weights, float64 (so
a TP-split prefill, which sums o_proj partials across ranks, chooses the same tokens as the
monolithic model). Its KV cache is paged HND per layer, [pages, kv_heads, page_tokens, head_dim],
K and V separate: the layout fabric_lib.kv transfers.

Attention heads can be split like tensor parallelism: a rank computes query heads [qa, qb) with
their KV heads [ka, kb), and an ``allreduce`` callable sums the o_proj partials of all ranks.

Everything runs on `device` (CPU here, CUDA in tests/device); ``forward_indexed`` takes
precomputed index tensors and makes no host<->device copies, so it can be captured in a CUDA
graph (apps/kv/tests/device)."""

from __future__ import annotations

import math

import torch

VOCAB, HIDDEN, LAYERS, Q_HEADS, KV_HEADS, HEAD_DIM, MLP = 97, 64, 3, 8, 4, 16, 128
GROUP = Q_HEADS // KV_HEADS
DTYPE = torch.float64


class TinyModel:
    def __init__(self, seed: int = 8, device: str = "cpu") -> None:  # seed 8: 12 distinct greedy tokens for the tests' prompt
        g = torch.Generator().manual_seed(seed)
        self.device = torch.device(device)

        def w(rows: int, cols: int) -> torch.Tensor:
            return torch.randn(rows, cols, generator=g, dtype=DTYPE) / math.sqrt(rows)

        self.embed = torch.randn(VOCAB, HIDDEN, generator=g, dtype=DTYPE)
        self.layers = []
        for _ in range(LAYERS):
            self.layers.append({
                "wq": w(HIDDEN, Q_HEADS * HEAD_DIM), "wk": w(HIDDEN, KV_HEADS * HEAD_DIM),
                "wv": w(HIDDEN, KV_HEADS * HEAD_DIM), "wo": w(Q_HEADS * HEAD_DIM, HIDDEN),
                "w_gate": w(HIDDEN, MLP), "w_up": w(HIDDEN, MLP), "w_down": w(MLP, HIDDEN),
                "norm1": 1.0 + 0.1 * torch.randn(HIDDEN, generator=g, dtype=DTYPE),
                "norm2": 1.0 + 0.1 * torch.randn(HIDDEN, generator=g, dtype=DTYPE),
            })
        self.final_norm = 1.0 + 0.1 * torch.randn(HIDDEN, generator=g, dtype=DTYPE)
        self.lm_head = w(HIDDEN, VOCAB)
        # Weights are drawn on the CPU (the same numbers on every device), then moved.
        self.embed, self.final_norm, self.lm_head = (t.to(self.device) for t in (self.embed, self.final_norm, self.lm_head))
        self.layers = [{k: t.to(self.device) for k, t in p.items()} for p in self.layers]

    @staticmethod
    def _norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight

    @staticmethod
    def _rope(x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:  # x: [T, heads, dim]
        half = HEAD_DIM // 2
        freq = 1.0 / (10000.0 ** (torch.arange(half, dtype=DTYPE, device=x.device) / half))
        ang = pos.to(DTYPE)[:, None] * freq[None, :]
        cos, sin = ang.cos()[:, None, :], ang.sin()[:, None, :]
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)

    def _kv_index(self, qa: int, qb: int) -> torch.Tensor:
        """Local KV head of each local query head, as a device tensor made once (a list index
        inside a CUDA graph capture would be a host->device copy)."""
        cache = self.__dict__.setdefault("_kv_indices", {})
        if (qa, qb) not in cache:
            ka = qa // GROUP
            cache[(qa, qb)] = torch.tensor([(qa + i) // GROUP - ka for i in range(qb - qa)], device=self.device)
        return cache[(qa, qb)]

    def forward(self, tokens, start, page_table, cache, heads=(0, Q_HEADS), allreduce=None, on_layer=None):
        """Runs tokens at positions [start, start + len(tokens)); the cache must hold [0, start).
        Writes their K/V into `cache`, calls on_layer(l) after each layer, returns the last
        position's logits."""
        dev = self.device
        pos = torch.arange(start, start + len(tokens), device=dev)
        ctx = torch.arange(start + len(tokens), device=dev)
        table = torch.tensor(page_table, device=dev)
        return self.forward_indexed(torch.tensor(tokens, device=dev), pos, table[pos // cache.page_tokens],
                                    pos % cache.page_tokens, table[ctx // cache.page_tokens], ctx % cache.page_tokens,
                                    cache, heads, allreduce, on_layer)

    def forward_indexed(self, tokens, pos, pages, slots, ctx_pages, ctx_slots, cache, heads=(0, Q_HEADS), allreduce=None,
                        on_layer=None):
        """forward() with its index tensors given (no host<->device copies: CUDA-graph safe).
        pos/pages/slots: the new tokens' positions and cache places; ctx_*: every cached token's."""
        qa, qb = heads
        ka, kb = qa // GROUP, qb // GROUP
        t = tokens.shape[0]
        x = self.embed[tokens]
        local_kv = self._kv_index(qa, qb)
        causal = torch.arange(ctx_pages.shape[0], device=self.device)[None, :] <= pos[:, None]
        for index, p in enumerate(self.layers):
            h = self._norm(x, p["norm1"])
            q = (h @ p["wq"][:, qa * HEAD_DIM:qb * HEAD_DIM]).view(t, qb - qa, HEAD_DIM)
            k = (h @ p["wk"][:, ka * HEAD_DIM:kb * HEAD_DIM]).view(t, kb - ka, HEAD_DIM)
            v = (h @ p["wv"][:, ka * HEAD_DIM:kb * HEAD_DIM]).view(t, kb - ka, HEAD_DIM)
            q, k = self._rope(q, pos), self._rope(k, pos)
            cache.write(index, pages, slots, k, v)
            keys, values = cache.read(index, ctx_pages, ctx_slots)  # [S, kv heads, dim]
            keys, values = keys.index_select(1, local_kv), values.index_select(1, local_kv)
            scores = torch.einsum("tnd,snd->nts", q, keys) / math.sqrt(HEAD_DIM)
            scores = scores.masked_fill(~causal[None], float("-inf"))
            out = torch.einsum("nts,snd->tnd", scores.softmax(-1), values).reshape(t, (qb - qa) * HEAD_DIM)
            part = out @ p["wo"][qa * HEAD_DIM:qb * HEAD_DIM, :]
            x = x + (allreduce(part) if allreduce else part)
            h = self._norm(x, p["norm2"])
            x = x + (torch.nn.functional.silu(h @ p["w_gate"]) * (h @ p["w_up"])) @ p["w_down"]
            if on_layer:
                on_layer(index)
        return self._norm(x[-1], self.final_norm) @ self.lm_head


class PagedCache:
    """[layers, K/V, pages, kv_heads, page_tokens, head_dim]: layer-major, K then V buffer per layer,
    pages packed: kv.KvMemoryLayout.contiguous(layout, tp, "separate", pages) describes it."""

    def __init__(self, num_pages: int, kv_heads: int, page_tokens: int, device: str = "cpu") -> None:
        self.page_tokens = page_tokens
        self.buf = torch.zeros(LAYERS, 2, num_pages, kv_heads, page_tokens, HEAD_DIM, dtype=DTYPE, device=device)

    def _views(self, layer):  # [pages, page_tokens, heads, dim] views of K and V
        return self.buf[layer, 0].permute(0, 2, 1, 3), self.buf[layer, 1].permute(0, 2, 1, 3)

    def write(self, layer, pages, slots, k, v) -> None:
        kview, vview = self._views(layer)
        kview[pages, slots] = k
        vview[pages, slots] = v

    def read(self, layer, pages, slots):
        kview, vview = self._views(layer)
        return kview[pages, slots], vview[pages, slots]

    @property
    def nbytes(self) -> int:
        return self.buf.numel() * self.buf.element_size()


def greedy_decode(model, first_logits, prompt_len, page_table, cache, steps):
    """Greedy tokens: the first from the prefill's logits, then `steps` - 1 decode steps."""
    tokens = [int(first_logits.argmax())]
    for i in range(steps - 1):
        logits = model.forward([tokens[-1]], prompt_len + i, page_table, cache)
        tokens.append(int(logits.argmax()))
    return tokens

"""A small Qwen3-MoE from the `transformers` library (built from a config, nothing downloaded)
for the identical-logits test: same interface as tiny_moe.Spec. The parameter list is whatever
this transformers version builds (per-expert ModuleLists or fused 3-D expert tensors: the
destination planner handles both); the weights are re-initialized here from a seeded generator,
whatever the library's own init does, so every process gets the same values."""
from __future__ import annotations

import math
from typing import Dict, Optional, Tuple

import torch


def unavailable_reason() -> Optional[str]:
    """None when transformers with Qwen3-MoE imports here, else why not."""
    try:
        import transformers  # noqa: F401
        from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM  # noqa: F401
    except Exception as e:  # noqa: BLE001 - any import problem means "not available"
        return f"transformers with Qwen3-MoE is not importable: {type(e).__name__}: {e}"
    return None


def _config():
    from transformers import Qwen3MoeConfig
    cfg = Qwen3MoeConfig(
        vocab_size=512, hidden_size=256, intermediate_size=512, moe_intermediate_size=128,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
        num_experts=4, num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1,
        mlp_only_layers=[0], tie_word_embeddings=False, max_position_embeddings=256,
        use_cache=False, attention_bias=False, output_router_logits=False)
    # Eager attention: plain matmuls, the same kernels in every process.
    for attr in ("_attn_implementation", "attn_implementation"):
        try:
            setattr(cfg, attr, "eager")
            break
        except Exception:  # noqa: BLE001 - read-only in some versions
            continue
    return cfg


def _build():
    from transformers import Qwen3MoeForCausalLM
    return Qwen3MoeForCausalLM(_config()).eval()


class Runner:
    def __init__(self, device: str) -> None:
        self.device = device
        self.model = _build().to(device=device, dtype=torch.bfloat16)
        self.params = dict(self.model.named_parameters())

    @torch.no_grad()
    def load(self, weights: Dict[str, torch.Tensor]) -> None:
        missing = set(self.params) - set(weights)
        if missing:
            raise KeyError(f"no weights for {sorted(missing)[:5]}")
        for name, p in self.params.items():
            w = weights[name]
            if w.shape != p.shape or w.dtype != p.dtype or w.device != p.device:
                raise ValueError(f"{name}: {tuple(w.shape)} {w.dtype} {w.device} for a parameter {tuple(p.shape)} {p.dtype} {p.device}")
            p.data = w  # a view into the destination buffer stays one

    @torch.no_grad()
    def logits(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=tokens.to(self.device), use_cache=False).logits.float()


class Spec:
    name = "hf-qwen3-moe"
    vocab = 512

    def __init__(self) -> None:
        model = _build()
        self._shapes: Dict[str, Tuple[int, ...]] = {n: tuple(p.shape) for n, p in model.named_parameters()}

    def shapes(self) -> Dict[str, Tuple[int, ...]]:
        return dict(self._shapes)

    def init_weights(self, seed: int) -> Dict[str, torch.Tensor]:
        out = {}
        for index, (name, shape) in enumerate(self._shapes.items()):
            g = torch.Generator().manual_seed(seed * 100003 + index)
            if len(shape) == 1:
                out[name] = 1.0 + 0.1 * torch.randn(shape, generator=g)
            elif "embed_tokens" in name:
                out[name] = torch.randn(shape, generator=g)
            else:
                out[name] = torch.randn(shape, generator=g) / math.sqrt(shape[-1])
        return out

    def runner(self, device: str) -> Runner:
        return Runner(device)

"""The array backend the Python tests use, chosen by FABRIC_LIB_TEST_ARRAYS=numpy|torch
(default numpy). Every test that moves data creates, fills and reads its arrays through here,
so one suite covers numpy arrays and torch CPU tensors."""

from __future__ import annotations

import os

import numpy as np

BACKEND = os.environ.get("FABRIC_LIB_TEST_ARRAYS", "numpy")
if BACKEND not in ("numpy", "torch"):
    raise RuntimeError(f"FABRIC_LIB_TEST_ARRAYS must be 'numpy' or 'torch', got {BACKEND!r}")
if BACKEND == "torch":
    import torch


def pattern(nbytes: int, seed: int) -> np.ndarray:
    """Deterministic pseudo-random bytes (numpy, for computing expectations)."""
    return np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8)


def from_numpy(a: np.ndarray):
    """A backend array holding a copy of ``a`` (its own memory, not a view)."""
    if BACKEND == "torch":
        return torch.tensor(a)
    return a.copy()


def zeros(nbytes: int):
    """A zero-filled uint8 backend array."""
    if BACKEND == "torch":
        return torch.zeros(nbytes, dtype=torch.uint8)
    return np.zeros(nbytes, dtype=np.uint8)


def filled(nbytes: int, seed: int):
    """A uint8 backend array filled with ``pattern(nbytes, seed)``."""
    return from_numpy(pattern(nbytes, seed))


def to_numpy(a) -> np.ndarray:
    """A numpy copy of a backend array's bytes (uint8, flat)."""
    if BACKEND == "torch":
        return a.detach().cpu().contiguous().view(torch.uint8).numpy().reshape(-1).copy()
    return np.ascontiguousarray(a).view(np.uint8).reshape(-1).copy()


def non_contiguous(nbytes: int):
    """A strided (every other element) view: registration must refuse it."""
    base = zeros(2 * nbytes)
    return base[::2]


def typed(n: int, dtype: str):
    """A backend array of ``n`` elements of ``dtype`` ('float32', 'int64', ...)."""
    if BACKEND == "torch":
        return torch.ones(n, dtype=getattr(torch, dtype))
    return np.ones(n, dtype=dtype)

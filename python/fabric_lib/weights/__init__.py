"""fabric_lib.weights: RL weight transfer from training ranks straight into inference memory.

Three roles, each with its own engine (provider "tcp", "shm", "efa", ...):

* ``Controller(trainers, inference)``: ``address`` goes to every rank; ``run()`` gathers their
  metadata, checks it and hands out the static schedule (blocks until all ranks connected).
* ``TrainerEndpoint``: ``add_shard(name, local_tensor, global_shape, box)`` for each FSDP (TP/EP/PP)
  shard it holds, ``connect()`` once, then ``send(step)`` after every optimizer step.
* ``InferenceEndpoint``: ``add_tensor(...)`` for each destination parameter (``stacked(...)`` builds
  fused qkv / gate_up and TP slices), ``connect()`` once, then ``wait_for_version(step)`` — shaped
  for a vLLM worker extension (register the model's parameters once, wait per update).

Tensors are numpy arrays (bf16 as uint16 arrays, dtype="bf16") or torch tensors (bfloat16,
float32, float8_e4m3fn), C-contiguous, on the CPU or (CUDA builds) the GPU; the endpoints keep
them alive. Host-memory shards are prepared on the CPU (fp8 by the CPU reference, bit-identical to
the CUDA kernel), GPU shards on the GPU. GPU destinations need a transport that writes GPU memory
(the same-host "ipc" backend, or EFA/verbs builds with FI_HMEM).

Also: ``quantize_fp8`` (the CPU reference, numpy), ``quantize_fp8_cuda`` (the app's CUDA kernel on
device pointers; ``cuda_available()`` says whether this build has it), and
``python -m fabric_lib.weights.bench`` (the pipeline benchmark, bench.py).
"""
from __future__ import annotations

from typing import Iterable, Optional, Sequence, Tuple

from . import _fabric_lib_weights as _w

quantize_fp8 = _w.quantize_fp8
trainer_box = _w.trainer_box
cuda_available = _w.cuda_available
quantize_fp8_cuda = _w.quantize_fp8_cuda

__all__ = ["Controller", "TrainerEndpoint", "InferenceEndpoint", "stacked", "trainer_box", "quantize_fp8",
           "cuda_available", "quantize_fp8_cuda"]


def _memory(t) -> Tuple[int, int, Optional[str], str]:
    """(address, nbytes, dtype name or None, "host" | "cuda") of a C-contiguous numpy array or
    torch tensor."""
    if hasattr(t, "data_ptr"):  # torch
        if not t.is_contiguous():
            raise ValueError("tensor is not contiguous; pass t.contiguous()")
        if t.device.type not in ("cpu", "cuda"):
            raise ValueError(f"tensors on {t.device.type} are not supported")
        names = {"torch.bfloat16": "bf16", "torch.float32": "f32", "torch.float8_e4m3fn": "fp8_e4m3"}
        kind = "cuda" if t.device.type == "cuda" else "host"
        return t.data_ptr(), t.numel() * t.element_size(), names.get(str(t.dtype)), kind
    iface = t.__array_interface__
    if iface.get("strides") is not None and not t.flags["C_CONTIGUOUS"]:
        raise ValueError("array is not C-contiguous; pass numpy.ascontiguousarray(x)")
    names = {"float32": "f32"}
    return iface["data"][0], t.nbytes, names.get(str(t.dtype)), "host"


class Controller:
    """Plans the transfer for `trainers` trainer ranks and `inference` inference ranks."""

    def __init__(self, trainers: int, inference: int, provider: str = "tcp", domains: int = 1,
                 interfaces: Sequence[str] = (), setup_timeout_s: float = 60.0, max_task_bytes: int = 16 << 20):
        self._c = _w.Controller(trainers, inference, provider, domains, list(interfaces), setup_timeout_s, max_task_bytes)

    @property
    def address(self) -> str:
        return self._c.address

    def run(self) -> dict:
        return self._c.run()


class TrainerEndpoint:
    """A trainer rank: its shards, and send(step) after each optimizer step."""

    def __init__(self, rank: int, world: int, controller: str, provider: str = "tcp", domains: int = 1,
                 interfaces: Sequence[str] = (), watermark_bytes: int = 64 << 20, step_timeout_s: float = 30.0,
                 prepare_on_gpu: bool = False):
        self._t = _w.Trainer(rank, world, controller, provider, domains, list(interfaces), watermark_bytes, step_timeout_s,
                             prepare_on_gpu)
        self._keep = []

    def add_shard(self, name: str, local, global_shape: Sequence[int], box=None, *, fsdp: Optional[Tuple[int, int]] = None,
                  dtype: Optional[str] = None) -> None:
        """Declares `local` (the rank's shard, row-major) as `box` (r0, r1, c0, c1) of the 2-D view of
        `global_shape`, or as FSDP dim-0 chunk `fsdp=(size, rank)`. A rank without rows passes nothing."""
        address, nbytes, kind, where = _memory(local)
        dtype = dtype or kind
        if dtype is None:
            raise ValueError(f"{name}: pass dtype= ('bf16' for uint16 arrays holding bfloat16)")
        if box is None:
            if fsdp is None:
                raise ValueError(f"{name}: pass box= or fsdp=(size, rank)")
            box = _w.trainer_box(name, list(global_shape), fsdp[0], fsdp[1])
            if box is None:
                return
        region = self._t.register(address, nbytes, where)
        self._keep.append(local)
        self._t.add_shard(name, list(global_shape), dtype, tuple(box), region, 0)

    def connect(self) -> None:
        self._t.connect()

    def send(self, step: int) -> dict:
        """Writes version `step` (use each value once) and returns the step's figures."""
        return self._t.send(step)

    @property
    def fingerprint(self) -> int:
        return self._t.fingerprint


def stacked(name: str, sources: Iterable[Tuple[str, Sequence[int]]], split: str = "replicated", tp: int = 1,
            tp_rank: int = 0):
    """(rows, cols, pieces) of a destination that stacks whole source parameters row-wise (one
    source: a plain parameter; q, k, v: fused qkv; gate, up: gate_up), each split over TP:
    split="rows" (column-parallel, vocab-parallel), "cols" (row-parallel) or "replicated"."""
    return _w.tp_pieces(name, [(n, list(s)) for n, s in sources], split, tp, tp_rank)


class InferenceEndpoint:
    """An inference rank: its destination tensors, and wait_for_version(step) per update."""

    def __init__(self, rank: int, world: int, controller: str, provider: str = "tcp", domains: int = 1,
                 interfaces: Sequence[str] = ()):
        self._i = _w.Inference(rank, world, controller, provider, domains, list(interfaces))
        self._keep = []

    def add_tensor(self, name: str, tensor, layout, *, dtype: Optional[str] = None, scales=None) -> None:
        """Declares `tensor` as destination `name` with `layout` = stacked(...)'s (rows, cols,
        pieces). fp8 tensors (uint8 arrays with dtype="fp8_e4m3", or float8_e4m3fn tensors) need
        `scales`: f32, ceil(rows/128) x ceil(cols/128)."""
        rows, cols, pieces = layout
        address, nbytes, kind, where = _memory(tensor)
        dtype = dtype or kind
        if dtype is None:
            raise ValueError(f"{name}: pass dtype= ('bf16' for uint16 arrays, 'fp8_e4m3' for uint8 arrays)")
        region = self._i.register(address, nbytes, where)
        self._keep.append(tensor)
        scale_region = 0
        if dtype in ("fp8", "fp8_e4m3", "float8_e4m3fn"):
            if scales is None:
                raise ValueError(f"{name}: an fp8 destination needs its scale tensor")
            s_address, s_nbytes, _, s_where = _memory(scales)
            scale_region = self._i.register(s_address, s_nbytes, s_where)
            self._keep.append(scales)
        self._i.add_tensor(name, rows, cols, dtype, pieces, region, 0, scale_region, 0)

    def connect(self) -> None:
        self._i.connect()

    def wait_for_version(self, step: int, timeout_s: float = 30.0) -> None:
        """Returns once version `step` is completely written here; raises TimeoutError otherwise
        (a trainer died, a step failed): a partly written version never returns."""
        self._i.wait_for_version(step, timeout_s)

    @property
    def fingerprint(self) -> int:
        return self._i.fingerprint

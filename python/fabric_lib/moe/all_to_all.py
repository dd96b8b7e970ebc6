"""P2PAllToAll: MoE dispatch/combine over fabric-lib, with pplx-garden's P2PAllToAll constructor
and pplx-kernels' AllToAll dispatch()/combine() signatures, so code written for those runs here.

CPU tensors run the CPU halves (synchronously; the native call releases the GIL). CUDA tensors
launch the kernels on torch.cuda.current_stream() and return at once (no host synchronisation:
CUDA-graph safe; ``bound_m`` may be a device tensor).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Optional, Sequence

import torch

from . import _moe

MoeError = _moe.MoeError

# Element type names of the native layer. torch 1.13 has no float8 type: uint8 tensors carry fp8
# e4m3 bytes (dispatch moves bytes; only combine reads values, and it takes bf16/fp32).
_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32", torch.uint8: "fp8"}
if hasattr(torch, "float8_e4m3fn"):
    _DTYPES[torch.float8_e4m3fn] = "fp8"
_INDEX_DTYPES = {torch.int32} | ({torch.uint32} if hasattr(torch, "uint32") else set())


def _dtype_name(dtype: torch.dtype) -> str:
    if dtype not in _DTYPES:
        raise TypeError(f"unsupported dtype {dtype}")
    return _DTYPES[dtype]


def _is_torch_group(group: Any) -> bool:
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover
        return False
    return dist.is_available() and isinstance(group, dist.ProcessGroup)


def _group_rank_size(group: Any) -> tuple[int, int]:
    """(rank, size) of a torch.distributed process group or a pplx ``ParallelGroup``-like object."""
    if _is_torch_group(group):
        import torch.distributed as dist

        return dist.get_rank(group), dist.get_world_size(group)
    return int(group.rank), int(group.size)


def _all_gather(group: Any, obj: bytes) -> list[bytes]:
    if _is_torch_group(group):
        import torch.distributed as dist

        out: list[Any] = [None] * dist.get_world_size(group)
        dist.all_gather_object(out, obj, group=group)
        return out
    return list(group.all_gather_object(obj))


def _barrier(group: Any) -> None:
    if group is None:
        return
    if _is_torch_group(group):
        import torch.distributed as dist

        dist.barrier(group=group)
    else:
        group.barrier()


class P2PAllToAll:
    """Dispatch/combine between the ranks of one expert-parallel group.

    Ranks are found through ``global_group`` (a torch.distributed process group or a pplx
    ``ParallelGroup``), or through ``exchange(my_info) -> every rank's info`` with explicit
    ``rank`` and ``world_size``. ``dp_group`` of size > 1 (token replication) is not supported;
    ``node_group`` covering the whole world selects the same-host direct path on GPUs.

    On GPUs with the proxy path over the same-host ``ipc`` provider, run every kernel of the step
    (the experts) once before the first ``dispatch``, or set ``CUDA_MODULE_LOADING=EAGER``: CUDA's
    lazy loading of a kernel first launched while a receive half waits would hold back the
    proxy's copies until the step fails (docs/moe.md, "Lazy module loading").
    """

    def __init__(
        self,
        *,
        max_num_tokens: int,
        num_experts: int,
        expert_padding: int = 1,
        hidden_dim: int,
        hidden_dim_scale: Optional[int] = None,
        in_dtype: torch.dtype,
        out_dtype: torch.dtype,
        scale_dtype: Optional[torch.dtype] = None,
        num_experts_per_token: int,
        nets_per_gpu: int = 1,
        max_private_tokens: Optional[int] = None,
        device: Optional[torch.device] = None,
        dp_group: Any = None,
        node_group: Any = None,
        global_group: Any = None,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        exchange: Optional[Callable[[bytes], Sequence[bytes]]] = None,
        provider: Optional[str] = None,
        overflow_tokens: Optional[int] = None,
        path: Optional[str] = None,
        step_timeout_ms: int = 10000,
        proxy_cpu: Optional[int] = None,
        proxy_spin: bool = False,
        reorder_seed: int = 0,
    ) -> None:
        if dp_group is not None and _group_rank_size(dp_group)[1] > 1:
            raise NotImplementedError("dp_group of size > 1 (replicated tokens) is not supported")
        if global_group is not None:
            rank, world_size = _group_rank_size(global_group)
        elif rank is None or world_size is None or exchange is None:
            raise ValueError("give global_group, or rank, world_size and exchange")
        if (hidden_dim_scale is None) != (scale_dtype is None):
            raise ValueError("hidden_dim_scale and scale_dtype go together")
        if scale_dtype is not None and scale_dtype != torch.float32:
            raise TypeError("scales must be float32")
        self._device = torch.device(device) if device is not None else torch.device("cpu")
        on_gpu = self._device.type == "cuda"
        if path is None:
            path = "proxy"
            if node_group is not None:
                if _group_rank_size(node_group)[1] != world_size:
                    raise NotImplementedError("node_group must span the whole world (hierarchical EP is not built)")
                path = "direct"
        self._group = global_group
        self._in_dtype = in_dtype
        self._out_dtype = out_dtype
        self._hidden_dim = hidden_dim
        self._hidden_dim_scale = hidden_dim_scale
        self._k = num_experts_per_token
        self._max_num_tokens = max_num_tokens
        config = dict(
            max_num_tokens=max_num_tokens,
            num_experts=num_experts,
            experts_per_token=num_experts_per_token,
            hidden_dim=hidden_dim,
            hidden_dim_scale=hidden_dim_scale or 0,
            in_dtype=_dtype_name(in_dtype),
            out_dtype=_dtype_name(out_dtype),
            expert_padding=expert_padding,
            world_size=world_size,
            rank=rank,
            max_private_tokens=max_private_tokens,
            overflow_tokens=overflow_tokens,
            path=path,
            step_timeout_ms=step_timeout_ms,
            proxy_cpu=proxy_cpu,
            proxy_spin=proxy_spin,
        )
        provider = provider or os.environ.get("FABRIC_LIB_PROVIDER") or ("ipc" if on_gpu else "tcp")
        self._ctx = _moe.Context(
            config, provider, nets_per_gpu, (self._device.index or 0) if on_gpu else -1, reorder_seed
        )
        info = self._ctx.local_info()
        infos = _all_gather(global_group, info) if global_group is not None else list(exchange(info))  # type: ignore[misc]
        self._ctx.connect([bytes(i) for i in infos])
        geometry = self._ctx.geometry()
        self.num_local_experts: int = geometry["local_experts"]
        self.max_recv_tokens: int = geometry["max_recv_tokens"]
        self.buffer_bytes: int = geometry["buffer_bytes"]
        self.buffer_report: str = geometry["buffer_report"]
        self.rank, self.world_size = rank, world_size

    # --- the pplx-kernels AllToAll interface ---------------------------------------------------

    def dispatch(
        self,
        out_expert_num_tokens: torch.Tensor,
        out_expert_x: torch.Tensor,
        out_expert_x_scale: Optional[torch.Tensor],
        dp_x: torch.Tensor,
        dp_x_scale: Optional[torch.Tensor],
        indices: torch.Tensor,
        weights: torch.Tensor,
        bound_m: Optional[torch.Tensor] = None,
        do_send: bool = True,
        do_recv: bool = True,
    ) -> None:
        assert do_send or do_recv
        stream = self._stream(dp_x if do_send else out_expert_x)
        # Every argument is checked before either half runs: a refused call changes nothing.
        if do_send:
            num_tokens = dp_x.shape[0]
            self._check(dp_x, (num_tokens, self._hidden_dim), self._in_dtype, "dp_x")
            self._check(indices, (num_tokens, self._k), None, "indices")
            if indices.dtype not in _INDEX_DTYPES:
                raise TypeError(f"indices must be int32 or uint32, not {indices.dtype}")
            if self._hidden_dim_scale:
                if dp_x_scale is None:
                    raise ValueError("dp_x_scale is required")
                if dp_x_scale.shape != (num_tokens, self._hidden_dim_scale) or dp_x_scale.dtype != torch.float32:
                    raise ValueError(f"dp_x_scale must be float32 [{num_tokens}, {self._hidden_dim_scale}]")
        if do_recv:
            if out_expert_num_tokens.shape != (self.num_local_experts,) or out_expert_num_tokens.dtype != torch.int32:
                raise ValueError(f"out_expert_num_tokens must be int32 [{self.num_local_experts}]")
            rows = out_expert_x.shape[0]
            self._check(out_expert_x, (rows, self._hidden_dim), self._in_dtype, "out_expert_x")
            if self._hidden_dim_scale:
                if out_expert_x_scale is None or out_expert_x_scale.dtype != torch.float32:
                    raise ValueError("out_expert_x_scale must be a float32 tensor")
        if do_send:
            self._ctx.dispatch_send(
                dp_x.data_ptr(),
                dp_x.stride(0),
                dp_x_scale.data_ptr() if self._hidden_dim_scale else 0,
                dp_x_scale.stride(0) if self._hidden_dim_scale else 0,
                dp_x_scale.stride(1) if self._hidden_dim_scale else 1,
                indices.data_ptr(),
                indices.stride(0),
                num_tokens,
                self._bound_ptr(bound_m),
                stream,
            )
        if do_recv:
            self._ctx.dispatch_recv(
                out_expert_num_tokens.data_ptr(),
                out_expert_x.data_ptr(),
                out_expert_x.stride(0),
                rows,
                out_expert_x_scale.data_ptr() if self._hidden_dim_scale else 0,
                out_expert_x_scale.stride(0) if self._hidden_dim_scale else 0,
                out_expert_x_scale.stride(1) if self._hidden_dim_scale else 1,
                stream,
            )

    def combine(
        self,
        out_tokens: torch.Tensor,
        indices: torch.Tensor,
        weights: torch.Tensor,
        expert_y: torch.Tensor,
        bound_m: Optional[torch.Tensor] = None,
        do_send: bool = True,
        do_recv: bool = True,
        accumulate: bool = False,
    ) -> None:
        assert do_send or do_recv
        if accumulate:
            raise NotImplementedError("accumulate=True (TP accumulation) is not supported")
        stream = self._stream(expert_y if do_send else out_tokens)
        if do_send:
            rows = expert_y.shape[0]
            self._check(expert_y, (rows, self._hidden_dim), self._out_dtype, "expert_y")
        if do_recv:
            num_tokens = out_tokens.shape[0]
            self._check(out_tokens, (num_tokens, self._hidden_dim), self._out_dtype, "out_tokens")
            self._check(weights, (num_tokens, self._k), torch.float32, "weights")
        if do_send:
            self._ctx.combine_send(expert_y.data_ptr(), expert_y.stride(0), rows, stream)
        if do_recv:
            self._ctx.combine_recv(
                out_tokens.data_ptr(),
                out_tokens.stride(0),
                weights.data_ptr(),
                weights.stride(0),
                num_tokens,
                self._bound_ptr(bound_m),
                stream,
            )

    def destroy(self) -> None:
        """Ends the step stream on every rank (finish() plus a barrier), then frees everything.

        Call it on every rank after a complete step (combine done). It raises MoeError when the
        stream cannot end cleanly (a step half done, a failed all-to-all); close() then frees the
        buffers without the barrier."""
        if self._ctx is None:
            return
        self._ctx.finish(60000)
        _barrier(self._group)
        self.close()

    def close(self) -> None:
        """Frees everything now, without waiting for the peers (after a failure)."""
        if self._ctx is not None:
            self._ctx.close()
            self._ctx = None

    # --- extras ----------------------------------------------------------------------------------

    def status(self) -> str:
        """"ok", or the failure that ended this all-to-all."""
        return self._ctx.status()

    def proxy_times(self) -> list[dict]:
        return self._ctx.proxy_times()

    def _check(self, t: torch.Tensor, shape: tuple, dtype: Optional[torch.dtype], name: str) -> None:
        if tuple(t.shape) != tuple(shape):
            raise ValueError(f"{name} must have shape {tuple(shape)}, not {tuple(t.shape)}")
        if dtype is not None and t.dtype != dtype:
            raise TypeError(f"{name} must be {dtype}, not {t.dtype}")
        if t.dim() > 1 and t.stride(1) != 1:
            raise ValueError(f"{name} rows must be contiguous")
        if t.device.type != self._device.type:
            raise ValueError(f"{name} is on {t.device}, the all-to-all on {self._device}")

    def _stream(self, t: torch.Tensor) -> int:
        return torch.cuda.current_stream(t.device).cuda_stream if t.device.type == "cuda" else 0

    def _bound_ptr(self, bound_m: Optional[torch.Tensor]) -> int:
        if bound_m is None:
            return 0
        if bound_m.numel() != 1 or bound_m.dtype != torch.int32:
            raise ValueError("bound_m must be one int32")
        return bound_m.data_ptr()


# pplx-kernels' name for the same interface.
AllToAll = P2PAllToAll

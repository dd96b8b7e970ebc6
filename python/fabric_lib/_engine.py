"""fabric_lib.TransferEngine: the C++ engine plus a builder, a context manager and asyncio forms."""

from __future__ import annotations

import asyncio
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence

from . import _aio
from ._fabric_lib import (
    DomainAddress,
    MemoryRegionDescriptor,
    MemoryRegionHandle,
    PeerGroup,
    PreparedPagedWrites,
    PreparedScatter,
    ScatterSlice,
    ScatterTarget,
    Topology,
    detect_topology,
)
from ._fabric_lib import TransferEngine as _CoreEngine

PageList = Any  # a PageIndices or an iterable of ints


class TransferEngine(_CoreEngine):
    """RDMA-style point-to-point transfer engine (see the module docstring for the model).

    ``TransferEngine(provider="tcp", domains_per_group=2)`` builds and starts one; keyword
    arguments are those of :class:`TransferEngineBuilder`. ``nets_per_gpu`` is accepted as
    another name for ``domains_per_group``. Use it as a context manager (``with`` stops it) or
    call :meth:`stop`. Every ``submit_*`` method has an ``*_async`` form for asyncio that returns
    once the operation completed and raises its FabricError otherwise.
    """

    def __init__(
        self,
        provider: str = "tcp",
        domains_per_group: Optional[int] = None,
        *,
        nets_per_gpu: Optional[int] = None,
        groups: int = 1,
        interfaces: Optional[Sequence[str]] = None,
        group_interfaces: Optional[Mapping[int, Sequence[str]]] = None,
        pin_workers: Optional[Mapping[int, int]] = None,
        idle_policy: str = "adaptive",
        max_inflight_per_domain: Optional[int] = None,
        max_message_bytes: Optional[int] = None,
        imm_table_capacity: Optional[int] = None,
        simulate_unordered_network: int = 0,
        default_timeout: Optional[float] = None,
        stall_timeout: Optional[float] = None,
        peer_retry_interval: Optional[float] = None,
        topology: Optional[Topology] = None,
        metrics: bool = True,
        metrics_endpoint: Optional[str] = None,
    ) -> None:
        if domains_per_group is not None and nets_per_gpu is not None and domains_per_group != nets_per_gpu:
            raise ValueError("domains_per_group and nets_per_gpu name the same setting; give one")
        n = domains_per_group if domains_per_group is not None else nets_per_gpu
        if n is None:
            n = 0 if topology is not None else 1  # with a topology, 0 = the smallest NIC count
        super().__init__(
            provider=provider,
            domains_per_group=n,
            groups=groups,
            interfaces=list(interfaces or []),
            group_interfaces={int(g): list(v) for g, v in (group_interfaces or {}).items()},
            pin_workers={int(g): int(c) for g, c in (pin_workers or {}).items()},
            idle_policy=idle_policy,
            max_inflight_per_domain=max_inflight_per_domain,
            max_message_bytes=max_message_bytes,
            imm_table_capacity=imm_table_capacity,
            simulate_unordered_network=simulate_unordered_network,
            default_timeout=default_timeout,
            stall_timeout=stall_timeout,
            peer_retry_interval=peer_retry_interval,
            topology=topology,
            metrics=metrics,
            metrics_endpoint=metrics_endpoint,
        )

    @staticmethod
    def detect_topology(sysfs_root: str = "/sys") -> Topology:
        """The machine's GPUs, RDMA NICs and their grouping (see :func:`fabric_lib.detect_topology`);
        iterate it for its TopologyGroups, or pass it as ``TransferEngine(topology=...)``."""
        return detect_topology(sysfs_root)

    @staticmethod
    def builder() -> "TransferEngineBuilder":
        """A :class:`TransferEngineBuilder` with default settings."""
        return TransferEngineBuilder()

    def __enter__(self) -> "TransferEngine":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "stopped" if self.stopped else "running"
        return (f"TransferEngine(provider={self.provider!r}, groups={self.num_groups}, "
                f"nets_per_gpu={self.nets_per_gpu}, main_address={str(self.main_address)!r}, {state})")

    # --- asyncio forms -------------------------------------------------------------------------

    async def send_async(self, addr: DomainAddress, data: Any, *, timeout: Optional[float] = None) -> None:
        """Awaitable :meth:`submit_send`."""
        fut, on_done, on_error = _aio.future_callbacks()
        self.submit_send(addr, data, on_done, on_error, timeout=timeout)
        await fut

    async def imm_async(self, imm_data: int, dst_mr: MemoryRegionDescriptor, *, group: int = 0,
                        timeout: Optional[float] = None) -> None:
        """Awaitable :meth:`submit_imm`."""
        fut, on_done, on_error = _aio.future_callbacks()
        self.submit_imm(imm_data, dst_mr, on_done, on_error, group=group, timeout=timeout)
        await fut

    async def write_async(
        self,
        src_mr: MemoryRegionHandle,
        offset: int,
        length: int,
        imm_data: Optional[int],
        dst_mr: MemoryRegionDescriptor,
        dst_offset: int,
        num_shards: Optional[int] = None,
        *,
        domain: Optional[int] = None,
        timeout: Optional[float] = None,
    ) -> None:
        """Awaitable :meth:`submit_write`."""
        fut, on_done, on_error = _aio.future_callbacks()
        self.submit_write(src_mr, offset, length, imm_data, dst_mr, dst_offset, on_done, on_error,
                          num_shards, domain=domain, timeout=timeout)
        await fut

    async def paged_writes_async(
        self,
        length: int,
        src_mr: MemoryRegionHandle,
        src_page_indices: PageList,
        src_stride: int,
        src_offset: int,
        dst_mr: MemoryRegionDescriptor,
        dst_page_indices: PageList,
        dst_stride: int,
        dst_offset: int,
        imm_data: Optional[int],
        num_shards: Optional[int] = None,
        *,
        domain: Optional[int] = None,
        timeout: Optional[float] = None,
    ) -> None:
        """Awaitable :meth:`submit_paged_writes`."""
        fut, on_done, on_error = _aio.future_callbacks()
        self.submit_paged_writes(length, src_mr, src_page_indices, src_stride, src_offset, dst_mr,
                                 dst_page_indices, dst_stride, dst_offset, imm_data, on_done, on_error,
                                 num_shards, domain=domain, timeout=timeout)
        await fut

    async def scatter_async(
        self,
        src_mr: MemoryRegionHandle,
        targets: Sequence[ScatterTarget],
        imm_data: Optional[int],
        *,
        by_bytes: bool = False,
        num_shards: Optional[int] = None,
        domain: Optional[int] = None,
        peer_group: Optional[PeerGroup] = None,
        timeout: Optional[float] = None,
    ) -> None:
        """Awaitable :meth:`submit_scatter`."""
        fut, on_done, on_error = _aio.future_callbacks()
        self.submit_scatter(src_mr, list(targets), imm_data, on_done, on_error, by_bytes=by_bytes,
                            num_shards=num_shards, domain=domain, peer_group=peer_group, timeout=timeout)
        await fut

    async def prepared_paged_writes_async(
        self,
        prepared: PreparedPagedWrites,
        src_page_indices: PageList,
        dst_page_indices: PageList,
        imm_data: Optional[int],
        *,
        timeout: Optional[float] = None,
    ) -> None:
        """Awaitable :meth:`submit_prepared_paged_writes`."""
        fut, on_done, on_error = _aio.future_callbacks()
        self.submit_prepared_paged_writes(prepared, src_page_indices, dst_page_indices, imm_data, on_done, on_error,
                                          timeout=timeout)
        await fut

    async def prepared_scatter_async(
        self,
        prepared: PreparedScatter,
        slices: Sequence[ScatterSlice],
        imm_data: Optional[int],
        *,
        timeout: Optional[float] = None,
    ) -> None:
        """Awaitable :meth:`submit_prepared_scatter`."""
        fut, on_done, on_error = _aio.future_callbacks()
        self.submit_prepared_scatter(prepared, list(slices), imm_data, on_done, on_error, timeout=timeout)
        await fut

    async def send_from_async(self, addr: DomainAddress, src_mr: MemoryRegionHandle, offset: int, length: int, *,
                              timeout: Optional[float] = None) -> None:
        """Awaitable :meth:`submit_send_from`: the bytes may be changed once it returns."""
        fut, on_done, on_error = _aio.future_callbacks()
        self.submit_send_from(addr, src_mr, offset, length, on_done, on_error, timeout=timeout)
        await fut

    async def barrier_async(self, imm_data: int, dst_mrs: Sequence[MemoryRegionDescriptor], *, group: int = 0,
                            timeout: Optional[float] = None) -> None:
        """Awaitable :meth:`submit_barrier`."""
        fut, on_done, on_error = _aio.future_callbacks()
        self.submit_barrier(imm_data, list(dst_mrs), on_done, on_error, group=group, timeout=timeout)
        await fut

    def bouncing_recvs_async(self, count: int, len: int) -> _aio.MessageQueue:  # noqa: A002 (name kept from the API)
        """:meth:`submit_bouncing_recvs` for asyncio: returns a :class:`MessageQueue`; ``await
        queue.get()`` yields each message. Call it from a coroutine (it binds the running loop)."""
        queue = _aio.MessageQueue(asyncio.get_running_loop())
        self.submit_bouncing_recvs(count, len, queue.on_recv, queue.on_error)
        return queue

    async def wait_imm_count(self, imm: int, expected_count: int, timeout: Optional[float] = None) -> None:
        """Returns once ``expected_count`` imms of value ``imm`` have arrived (early arrivals count),
        consuming them like :meth:`set_imm_count_expected`.

        With ``timeout`` (seconds) the engine ends the expectation by then and this raises
        DeadlineExceededError, a TimeoutError; what arrived stays counted. If the awaiting task is
        cancelled, the expectation is removed with :meth:`remove_imm_count`, which also forgets the
        count. Raises the engine's FabricError otherwise (e.g. CancelledError at stop()).
        """
        fut, on_done, on_error = _aio.future_callbacks()
        self.set_imm_count_expected(imm, expected_count, on_done, on_error, timeout=timeout)
        try:
            await fut
        except asyncio.CancelledError:
            if not self.stopped:
                self.remove_imm_count(imm)
            raise


class TransferEngineBuilder:
    """Collects settings step by step, then :meth:`build` makes a :class:`TransferEngine`.

    ``TransferEngine.builder().provider("shm").domains_per_group(2).build()`` is the same as
    ``TransferEngine(provider="shm", domains_per_group=2)``.
    """

    def __init__(self) -> None:
        self._settings: Dict[str, Any] = {}

    def _set(self, key: str, value: Any) -> "TransferEngineBuilder":
        self._settings[key] = value
        return self

    def provider(self, name: str) -> "TransferEngineBuilder":
        """Any libfabric provider: 'tcp' (default), 'shm', 'udp;ofi_rxd', 'efa', 'verbs;ofi_rxm', ..."""
        return self._set("provider", name)

    def domains_per_group(self, n: int) -> "TransferEngineBuilder":
        """Domains (NICs) per group, 1..16 (default 1). Peers must use the same number."""
        return self._set("domains_per_group", n)

    def nets_per_gpu(self, n: int) -> "TransferEngineBuilder":
        """Another name for :meth:`domains_per_group`."""
        return self._set("domains_per_group", n)

    def groups(self, n: int) -> "TransferEngineBuilder":
        """Number of groups (one per GPU, typically), each with its own worker thread (default 1)."""
        return self._set("groups", n)

    def interfaces(self, names: Iterable[str]) -> "TransferEngineBuilder":
        """Domain or interface names (e.g. 'lo', 'eth0'); domain i of a group uses entry i % len."""
        return self._set("interfaces", list(names))

    def group_interfaces(self, group: int, names: Iterable[str]) -> "TransferEngineBuilder":
        """Overrides :meth:`interfaces` for one group."""
        self._settings.setdefault("group_interfaces", {})[group] = list(names)
        return self

    def pin_worker(self, group: int, cpu: int) -> "TransferEngineBuilder":
        """Pins the worker thread of ``group`` to ``cpu``."""
        self._settings.setdefault("pin_workers", {})[group] = cpu
        return self

    def idle_policy(self, policy: str) -> "TransferEngineBuilder":
        """'adaptive' (default: spin briefly, then sleep) or 'spin' (lowest latency, one busy core)."""
        return self._set("idle_policy", policy)

    def max_inflight_per_domain(self, n: int) -> "TransferEngineBuilder":
        """Caps the work requests outstanding per domain (default: the provider's queue size)."""
        return self._set("max_inflight_per_domain", n)

    def max_message_bytes(self, n: int) -> "TransferEngineBuilder":
        """Largest ``submit_send`` message (default 64 KiB)."""
        return self._set("max_message_bytes", n)

    def metrics(self, on: bool) -> "TransferEngineBuilder":
        """Latency histograms and per-peer metrics in :meth:`TransferEngine.metrics` (default on)."""
        return self._set("metrics", on)

    def metrics_endpoint(self, address: str) -> "TransferEngineBuilder":
        """Serves the metrics in the Prometheus text format at ``http://<address>/metrics``
        (``"127.0.0.1:9464"``; port 0 picks a free one, see ``engine.metrics_endpoint``)."""
        return self._set("metrics_endpoint", address)

    def imm_table_capacity(self, n: int) -> "TransferEngineBuilder":
        """Distinct imm values the imm counter holds (default 65536)."""
        return self._set("imm_table_capacity", n)

    def default_timeout(self, seconds: float) -> "TransferEngineBuilder":
        """Deadline of requests submitted without ``timeout=`` (default: none)."""
        return self._set("default_timeout", seconds)

    def stall_timeout(self, seconds: float) -> "TransferEngineBuilder":
        """A path with work in flight and no progress for this long fails (default 10 s; 0: off)."""
        return self._set("stall_timeout", seconds)

    def peer_retry_interval(self, seconds: float) -> "TransferEngineBuilder":
        """How long requests to an unreachable peer fail at once before it is tried again (default 1 s)."""
        return self._set("peer_retry_interval", seconds)

    def from_topology(self, topology: Topology, nets_per_gpu: int = 0) -> "TransferEngineBuilder":
        """One group per group of ``topology`` (:func:`detect_topology`) with ``nets_per_gpu`` of its
        NICs each (0: the smallest NIC count), workers pinned NUMA-locally. Choose the provider
        separately (e.g. 'efa')."""
        self._settings["topology"] = topology
        return self._set("domains_per_group", nets_per_gpu)

    def simulate_unordered_network(self, seed: int) -> "TransferEngineBuilder":
        """Test aid: shuffles work requests and holds back completions like EFA would (0 = off)."""
        return self._set("simulate_unordered_network", seed)

    def build(self) -> TransferEngine:
        """Builds and starts the engine; raises a FabricError subclass when a setting is invalid."""
        return TransferEngine(**self._settings)

    def settings(self) -> Dict[str, Any]:
        """The settings recorded so far, as :class:`TransferEngine` keyword arguments."""
        return {k: (dict(v) if isinstance(v, dict) else v) for k, v in self._settings.items()}


__all__: List[str] = ["TransferEngine", "TransferEngineBuilder"]

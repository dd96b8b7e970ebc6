"""fabric_lib: RDMA-style point-to-point transfers for LLM systems, from Python.

A :class:`TransferEngine` moves bytes between registered memory regions of processes or hosts
with one-sided WRITE / WRITE_WITH_IMM (single, paged, scatter, barrier) and two-sided SEND/RECV,
over any libfabric provider (tcp, shm, udp;ofi_rxd, efa, verbs;ofi_rxm), several NICs
("domains") per group. The receiver learns that data arrived by **imm counting**: every work
request carries the 32-bit imm; ``set_imm_count_expected(imm, n, on_reached)`` fires once n have
arrived, counting those that came before the call. How many imms a request delivers is a pure
function of the request (``imm_count_of_write`` and friends), so the receiver can compute it.
``set_imm_count_every(imm, n, on_round)`` fires every n arrivals instead, round after round.

Requests sent many times can be prepared once (``prepare_paged_writes``, ``prepare_scatter``) and
then submitted with only what changes; an accepted request can be cancelled by its transfer id
(``cancel``); messages can be sent from and received into registered memory without copies
(``submit_send_from``, ``submit_recvs_into``).

Memory is registered with ``register_tensor`` (numpy arrays, torch tensors, anything with
``__dlpack__`` or the buffer protocol) or ``register_memory(ptr, len, device)``; each returns a
local :class:`MemoryRegionHandle` and a :class:`MemoryRegionDescriptor` to give to peers (bytes,
hex or pickle).

Callbacks (``on_done()``, ``on_error(err)``, ``on_recv(bytes)``, imm callbacks) run on the engine's
callback thread with the GIL held; an exception they raise is logged (logger ``fabric_lib``) and
ignored. Errors are :class:`FabricError` subclasses carrying ``code`` and ``message``.

``detect_topology()`` reads the machine's GPUs and RDMA NICs; ``TransferEngine(provider="efa",
topology=detect_topology(), nets_per_gpu=4)`` makes one domain group per GPU with its own NICs.
"""

from __future__ import annotations

from ._fabric_lib import (
    IMM_COUNT_OF_BARRIER_PER_PEER,
    IMM_COUNT_OF_IMM_ONLY,
    AlreadyExistsError,
    CancelledError,
    DeadlineExceededError,
    DomainAddress,
    DomainDownError,
    DomainInfo,
    FabricError,
    FailedPreconditionError,
    GpuInfo,
    InternalError,
    InvalidArgumentError,
    MalformedError,
    MappedWord,
    MemoryRegionDescriptor,
    MemoryRegionHandle,
    NotFoundError,
    OutOfRangeError,
    PageIndices,
    PeerGroup,
    PeerUnreachableError,
    PreparedPagedWrites,
    PreparedScatter,
    PreparedScatterTarget,
    ProviderError,
    ResourceExhaustedError,
    ScalarWatcher,
    ScatterSlice,
    ScatterTarget,
    StoppedError,
    Topology,
    TopologyGroup,
    UnsupportedError,
    alloc_mapped_word,
    callback_error_count,
    detect_topology,
    imm_count_of_paged_writes,
    imm_count_of_scatter_target,
    imm_count_of_write,
)
from ._aio import MessageQueue
from ._engine import TransferEngine, TransferEngineBuilder

__version__ = "0.1.0"

__all__ = [
    "IMM_COUNT_OF_BARRIER_PER_PEER",
    "IMM_COUNT_OF_IMM_ONLY",
    "AlreadyExistsError",
    "CancelledError",
    "DeadlineExceededError",
    "DomainAddress",
    "DomainDownError",
    "DomainInfo",
    "FabricError",
    "FailedPreconditionError",
    "GpuInfo",
    "InternalError",
    "InvalidArgumentError",
    "MalformedError",
    "MappedWord",
    "MemoryRegionDescriptor",
    "MemoryRegionHandle",
    "MessageQueue",
    "NotFoundError",
    "OutOfRangeError",
    "PageIndices",
    "PeerGroup",
    "PeerUnreachableError",
    "PreparedPagedWrites",
    "PreparedScatter",
    "PreparedScatterTarget",
    "ProviderError",
    "ResourceExhaustedError",
    "ScalarWatcher",
    "ScatterSlice",
    "ScatterTarget",
    "StoppedError",
    "Topology",
    "TopologyGroup",
    "TransferEngine",
    "TransferEngineBuilder",
    "UnsupportedError",
    "alloc_mapped_word",
    "callback_error_count",
    "detect_topology",
    "error_classes",
    "imm_count_of_paged_writes",
    "imm_count_of_scatter_target",
    "imm_count_of_write",
]


def error_classes() -> dict:
    """Every FabricError subclass of this build, by error code name (``{'not_found': NotFoundError, ...}``)."""
    from . import _fabric_lib

    out = {}
    for name in dir(_fabric_lib):
        obj = getattr(_fabric_lib, name)
        if isinstance(obj, type) and issubclass(obj, FabricError) and obj is not FabricError:
            out[obj.code] = obj
    return out


# Codes added to the C++ library later appear here too (as subclasses of FabricError).
for _cls in error_classes().values():
    globals().setdefault(_cls.__name__, _cls)
del _cls

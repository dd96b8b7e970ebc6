"""fabric_lib.kv: KV-cache transfer for disaggregated prefill/decode (docs/kv.md).

A decoder rank allocates destination pages and a tail slot, then ``Decoder.start()`` registers
the request's imm expectation, dispatches it to every prefill rank that supplies it (SEND) and
reports ``success`` once every expected imm has arrived: no completion message. A prefill rank's
``Prefiller`` writes each layer's pages as the model reports progress (``layer_done`` on the CPU,
or a UVM word the model's stream writes, ``attach_progress_watcher``), then the tail.

Both roles are polled, the way SGLang's and vLLM's KV connectors work: ``poll(id)`` returns one
of ``KV_POLL`` (SGLang's KVPoll names), ``get_finished()`` the requests that ended and whose pages
may be reused (vLLM's get_finished), ``status(id)`` the details. Every request ends, success or a
failure with a reason, by its deadline, whatever the peer does.

Memory is registered by pointer on a ``kv.Engine`` (its own TransferEngine): a torch tensor's
``data_ptr()`` and ``numel() * element_size()``, a numpy array's ``ctypes.data`` and ``nbytes``.
Errors raise fabric_lib's exception classes (``fabric_lib.InvalidArgumentError``, ...).
"""

from __future__ import annotations

import fabric_lib as _fabric_lib  # noqa: F401  (the error classes live there)

from ._kv import (
    Decoder,
    Engine,
    KvLayout,
    KvMemoryLayout,
    Prefiller,
    ProgressWatcher,
    expected_imm_count,
    pages_for_tokens,
    sources_of,
)

# SGLang's KVPoll states, by the names poll() returns, in their order.
KV_POLL = ("bootstrapping", "waiting_for_input", "transferring", "success", "failed")

__all__ = [
    "KV_POLL",
    "Decoder",
    "Engine",
    "KvLayout",
    "KvMemoryLayout",
    "Prefiller",
    "ProgressWatcher",
    "expected_imm_count",
    "pages_for_tokens",
    "sources_of",
]

"""MappedWord and ScalarWatcher from the host side. Without a usable GPU (CPU builds, CI) both say
UnsupportedError; with one, the words work and a host write reaches the watcher's callback
(tests/device/python/ bumps them from CUDA kernels on the GPU machine)."""

from __future__ import annotations

import ctypes
import threading
import time

import pytest

import fabric_lib as fl


def _wait(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


def test_watcher_needs_a_callable(fresh_engine):
    with pytest.raises(TypeError):
        fresh_engine.alloc_scalar_watcher(None)
    with pytest.raises(TypeError):
        fresh_engine.alloc_scalar_watcher(42)


def test_gpu_words(fresh_engine):
    try:
        word = fl.alloc_mapped_word()
    except fl.UnsupportedError as e:
        assert e.code == "unsupported" and "CUDA" in e.message
        with pytest.raises(fl.UnsupportedError):
            fresh_engine.alloc_scalar_watcher(lambda old, new: True)
        return
    # A GPU is usable here.
    with word:
        assert word.ptr != 0 and word.host_ptr != 0 and word.value == 0
        word.value = 5
        assert word.value == 5
    assert word.closed
    with pytest.raises(fl.FabricError):
        word.value  # noqa: B018  (closed)

    seen = []
    lock = threading.Lock()

    def on_change(old, new):
        with lock:
            seen.append((old, new))
        return new < 2  # stop watching at 2

    witnessed = []

    with fresh_engine.alloc_scalar_watcher(on_change) as w, \
            fresh_engine.alloc_scalar_watcher(lambda old, new: witnessed.append(new) or True) as witness:
        slot = ctypes.c_uint64.from_address(w.host_ptr)
        slot.value = 1  # the host may bump it too (kernels write w.ptr)
        assert _wait(lambda: len(seen) == 1)
        slot.value = 2
        assert _wait(lambda: len(seen) == 2)
        slot.value = 3
        # The watcher thread polls every watcher in each pass: once the witness has seen two
        # bumps made after the 3, a whole pass read the 3, and a watcher still active would
        # have been called.
        witness_slot = ctypes.c_uint64.from_address(witness.host_ptr)
        for bump in (1, 2):
            witness_slot.value = bump
            assert _wait(lambda: witnessed[-1:] == [bump])
        assert w.value == 3
    assert w.closed
    assert seen == [(0, 1), (1, 2)]

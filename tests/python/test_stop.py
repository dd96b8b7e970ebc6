"""stop() with operations pending completes each of them exactly once with an error; afterwards
every call raises StoppedError while the identity stays readable."""

from __future__ import annotations

import asyncio
import threading

import pytest

import arrays
import fabric_lib as fl
from peer import Peer, engine_options
from waiters import Completion, Completions


@pytest.mark.parametrize("provider", ["tcp", "shm"])
def test_stop_completes_pending_operations_with_errors(provider, imms):
    # A peer of its own: libfabric 1.17's shm provider can crash the *target* process when the
    # sender closes its endpoint with writes in flight, and the session's peer must survive.
    peer = Peer(provider)
    try:
        _stop_with_pending_operations(peer, provider, imms)
    finally:
        peer.kill()


def _stop_with_pending_operations(peer, provider, imms):
    e = fl.TransferEngine(**engine_options(provider))
    n = 1 << 20
    src = arrays.filled(n, 4)
    handle, _ = e.register_tensor(src)
    dst = peer.call("alloc", "stop_dst", n)
    expectations = Completions(3)
    for i in range(3):
        e.set_imm_count_expected(imms(), 1, *expectations.callbacks(i))
    recv_errors = Completion()
    e.submit_bouncing_recvs(4, 256, lambda m: None, recv_errors.on_error)
    writes = Completions(200)
    for i in range(200):
        e.submit_write(handle, 0, n, None, dst, 0, *writes.callbacks(i))
    e.stop()  # returns after every callback ran
    assert expectations.finished == 3 and expectations.error_codes() == ["cancelled"] * 3
    assert recv_errors.finished == 1 and recv_errors.error_codes() == ["cancelled"]
    assert writes.finished == 200  # each one: done, or an error
    assert set(writes.error_codes()) <= {"cancelled"}
    assert all(isinstance(err, fl.CancelledError) for err in expectations.errors + writes.errors)
    # Exactly once each, and nothing more after the quiet interval.
    writes.expect_exactly_once()
    expectations.expect_exactly_once()
    recv_errors.expect_exactly_once()


def test_after_stop(fresh_engine):
    e = fresh_engine
    handle, desc = e.register_tensor(arrays.zeros(64))
    address = e.main_address
    e.stop()
    e.stop()  # idempotent
    assert e.stopped and e.main_address == address and e.nets_per_gpu == 2
    with pytest.raises(fl.StoppedError) as info:
        e.submit_write(handle, 0, 8, None, desc, 0)
    assert info.value.code == "stopped"
    with pytest.raises(fl.StoppedError):
        e.register_tensor(arrays.zeros(64))
    with pytest.raises(fl.StoppedError):
        e.set_imm_count_expected(1, 1, print)
    with pytest.raises(fl.StoppedError):
        e.imm_count(1)


def test_context_manager_stops(imm):
    with fl.TransferEngine(provider="tcp", interfaces=["lo"]) as e:
        pending = Completion()
        e.set_imm_count_expected(imm, 2, pending.on_done, pending.on_error)
        assert not e.stopped
    assert e.stopped and pending.error_codes() == ["cancelled"]


def test_stop_from_another_thread_while_awaiting(imm):
    e = fl.TransferEngine(provider="tcp", interfaces=["lo"])

    async def main():
        waiter = asyncio.ensure_future(e.wait_imm_count(imm, 1))
        await asyncio.sleep(0.05)
        stopper = threading.Thread(target=e.stop)
        stopper.start()
        with pytest.raises(fl.CancelledError):
            await asyncio.wait_for(waiter, 10)
        stopper.join()

    asyncio.run(main())
    assert e.stopped


def test_forked_child_neither_uses_nor_stops_the_parents_engine():
    import os
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import os, sys, threading
        import fabric_lib as fl
        e = fl.TransferEngine(provider="tcp", interfaces=["lo"])
        buf = bytearray(64)
        _, desc = e.register_tensor(buf)
        pid = os.fork()
        if pid == 0:
            try:
                e.submit_imm(1, desc)
                print("child: submit worked?!")
            except fl.FailedPreconditionError as err:
                print("child:", err.code)
            e.stop()          # a no-op here: the engine's threads live in the parent
            sys.exit(0)       # atexit must not try to stop it either
        _, status = os.waitpid(pid, 0)
        done = threading.Event()
        e.set_imm_count_expected(2, 1, done.set)
        e.submit_imm(2, desc)
        print("parent:", os.waitstatus_to_exitcode(status), done.wait(10))
        e.stop()
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:2] == ["child: failed_precondition", "parent: 0 True"], r.stdout

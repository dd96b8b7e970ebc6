"""Callbacks run on the engine's callback thread with the GIL; one that raises is logged with its
traceback and the engine carries on; callbacks may call the engine."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import threading

import pytest

import arrays
import fabric_lib as fl
from waiters import Completion, Completions, wait_until


def _boom() -> None:
    raise ZeroDivisionError("user callback bug")


def test_raising_callbacks_are_logged_and_the_engine_continues(fresh_engine, imms, caplog):
    e = fresh_engine
    arr = arrays.filled(8192, 1)
    handle, desc = e.register_tensor(arr)
    inbox = arrays.zeros(8192)
    _, inbox_desc = e.register_tensor(inbox)
    before = fl.callback_error_count()
    bad, good = imms(), imms()
    with caplog.at_level(logging.ERROR, logger="fabric_lib"):
        e.set_imm_callback(lambda imm: _boom())                 # observer raises for every imm
        e.set_imm_count_expected(bad, 1, _boom)                 # on_reached raises
        e.submit_write(handle, 0, 8192, bad, inbox_desc, 0, _boom)  # on_done raises
        assert wait_until(lambda: fl.callback_error_count() - before >= 3)
        # The engine still works: a write after the failures completes and is counted.
        e.set_imm_callback(None)
        done, reached = Completion(), Completion()
        e.set_imm_count_expected(good, 1, reached.on_done, reached.on_error)
        e.submit_write(handle, 0, 8192, good, inbox_desc, 0, done.on_done, done.on_error)
        done.wait_ok()
        reached.wait_ok()
    assert arrays.to_numpy(inbox).tobytes() == arrays.pattern(8192, 1).tobytes()
    records = [r for r in caplog.records if r.name == "fabric_lib"]
    assert len(records) >= 3
    assert all(r.exc_info and r.exc_info[0] is ZeroDivisionError for r in records)
    assert any("on_done" in r.getMessage() for r in records)
    assert any("imm" in r.getMessage() for r in records)
    assert "user callback bug" in caplog.text and "Traceback" in caplog.text
    assert fl.callback_error_count() - before == len(records)


def test_callbacks_run_on_another_thread_and_may_submit(fresh_engine, imms):
    e = fresh_engine
    src = arrays.filled(4096, 2)
    handle, _ = e.register_tensor(src)
    inbox = arrays.zeros(4096)
    _, inbox_desc = e.register_tensor(inbox)
    first, second = imms(), imms()
    threads, chained = [], Completion()

    def after_first() -> None:
        threads.append(threading.get_ident())
        # A submit from inside a callback (the GIL is held here; the submit releases it).
        e.submit_write(handle, 0, 4096, second, inbox_desc, 0, chained.on_done, chained.on_error)

    reached = Completion()
    e.set_imm_count_expected(second, 1, reached.on_done, reached.on_error)
    e.submit_imm(first, inbox_desc, after_first)
    chained.wait_ok()
    reached.wait_ok()
    assert threads and threads[0] != threading.get_ident()
    assert arrays.to_numpy(inbox).tobytes() == arrays.pattern(4096, 2).tobytes()


def test_stop_from_a_callback_is_refused(fresh_engine, imm):
    e = fresh_engine
    _, desc = e.register_tensor(arrays.zeros(64))
    seen = []
    done = threading.Event()

    def try_stop() -> None:
        try:
            e.stop()
        except fl.FabricError as err:
            seen.append(err)
        done.set()

    e.submit_imm(imm, desc, try_stop)
    assert done.wait(10)
    assert len(seen) == 1 and isinstance(seen[0], fl.FailedPreconditionError)
    assert not e.stopped


def _run_script(body: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    script = "import sys; sys.path.insert(0, %r)\n" % os.path.dirname(__file__) + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout, env=env)


def test_engine_freed_inside_its_own_callback_does_not_hang():
    # The only reference to the engine is held by a callback; it goes away on the callback
    # thread, which must hand the teardown to another thread instead of joining itself.
    r = _run_script("""
        import threading, time, gc
        import fabric_lib as fl
        fired = threading.Event()
        def make():
            e = fl.TransferEngine(provider="tcp", interfaces=["lo"])
            buf = bytearray(64)
            _, desc = e.register_tensor(buf)
            holder = {"e": e}
            def on_done():
                holder.clear()       # drops the last reference to the engine ...
                fired.set()
            e.set_imm_count_expected(5, 1, lambda: None)
            e.submit_imm(5, desc, on_done)
        make()
        assert fired.wait(10)
        time.sleep(0.5)
        gc.collect()
        print("survived")
    """)
    assert r.returncode == 0, r.stderr
    assert "survived" in r.stdout


def test_exit_with_a_running_engine_cancels_pending_work():
    r = _run_script("""
        import fabric_lib as fl
        e = fl.TransferEngine(provider="tcp", interfaces=["lo"])
        e.set_imm_count_expected(9, 1, lambda: print("reached?!"), lambda err: print("pending:", err.code, flush=True))
        print("exiting", flush=True)
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["exiting", "pending:", "cancelled"]


def test_concurrent_submits_from_threads_each_complete_once(engine, peer, imm):
    n = 64 * 1024
    src = arrays.filled(n, 8)
    handle, _ = engine.register_tensor(src)
    dst = peer.call("alloc", f"conc{imm}", n)
    per_thread, threads = 250, 4
    done = Completions(per_thread * threads)

    def submitter(t: int) -> None:
        for i in range(per_thread):
            off = (t * per_thread + i) % 16 * 4096
            engine.submit_write(handle, off, 4096, imm, dst, off, *done.callbacks(t * per_thread + i))

    workers = [threading.Thread(target=submitter, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    done.wait_ok()  # each of the 1000 exactly once (a duplicate and a missing one do not cancel out)
    reached, left = peer.call("wait_imms", imm, per_thread * threads, 10.0)
    assert reached and left == 0
    assert peer.call("read", f"conc{imm}") == arrays.pattern(n, 8).tobytes()
    engine.unregister_memory(handle)

"""The awaitable forms: futures settled on their event loop (an eventfd the loop watches; call_soon_threadsafe
for loops that cannot watch one)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import threading

import numpy as np
import pytest

import arrays
import fabric_lib as fl
from peer import engine_options


def test_async_transfers(engine, peer, imms):
    n = 300_000
    src = arrays.filled(n, 21)
    handle, _ = engine.register_tensor(src)
    dst = peer.call("alloc", "async_dst", n)
    pages_dst = peer.call("alloc", "async_pages", 8 * 1024)
    w, p, s, b, i = imms(), imms(), imms(), imms(), imms()

    async def main():
        await engine.write_async(handle, 0, n, w, dst, 0)
        await engine.paged_writes_async(1024, handle, [3, 1], 1024, 0, pages_dst, [0, 7], 1024, 0, p)
        await asyncio.gather(
            engine.scatter_async(handle, [fl.ScatterTarget(100, dst_mr=dst)], s),
            engine.barrier_async(b, [dst, pages_dst]),
            engine.imm_async(i, dst),
            engine.send_async(peer.address, b"async hello"),
        )
        with pytest.raises(fl.OutOfRangeError):  # synchronous failures raise from the await too
            await engine.write_async(handle, 0, n + 1, None, dst, 0)

    peer.call("post_recvs", 1, 64)
    asyncio.run(main())
    assert peer.call("wait_imms", w, fl.imm_count_of_write(n, engine.nets_per_gpu), 10.0)[0]
    assert peer.call("wait_imms", p, 2, 10.0)[0]
    assert peer.call("wait_imms", s, 1, 10.0)[0]
    assert peer.call("wait_imms", b, 2, 10.0) == (True, 0)
    assert peer.call("wait_imms", i, 1, 10.0)[0]
    assert peer.call("take_messages", 1, 10.0) == [b"async hello"]
    expect = np.zeros(8 * 1024, dtype=np.uint8)
    pattern = arrays.pattern(n, 21)
    expect[0:1024] = pattern[3 * 1024 : 4 * 1024]
    expect[7 * 1024 : 8 * 1024] = pattern[1024:2048]
    assert peer.call("read", "async_pages") == expect.tobytes()
    engine.unregister_memory(handle)


def test_wait_imm_count_and_timeout(engine, peer, imms):
    inbox = arrays.zeros(64)
    _, desc = engine.register_tensor(inbox)
    arrived, partial = imms(), imms()

    async def main():
        waiter = asyncio.ensure_future(engine.wait_imm_count(arrived, 3, timeout=20))
        loop = asyncio.get_running_loop()
        assert await loop.run_in_executor(None, peer.call, "imms_to", desc, arrived, 4) == ["ok"] * 4
        await waiter
        assert await loop.run_in_executor(None, peer.call, "imms_to", desc, partial, 1) == ["ok"]
        with pytest.raises(fl.DeadlineExceededError) as info:  # 1 of 2 arrived
            await engine.wait_imm_count(partial, 2, timeout=0.3)
        assert isinstance(info.value, TimeoutError) and info.value.code == "deadline_exceeded"

    asyncio.run(main())
    assert engine.imm_count(arrived) == 1  # 4 arrived, 3 consumed
    assert engine.imm_count(partial) == 1  # the timed-out expectation ended; its count stays
    assert engine.remove_imm_count(partial) == (1, 0)
    assert engine.remove_imm_count(arrived) == (1, 0)


def test_submit_timeout_and_cancelled_wait(engine, imm):
    handle, desc = engine.register_tensor(arrays.zeros(64))
    with pytest.raises(ValueError, match="timeout"):
        engine.submit_imm(imm, desc, timeout=0)

    async def main():
        waiter = asyncio.ensure_future(engine.wait_imm_count(imm, 1))
        await asyncio.sleep(0.05)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter

    asyncio.run(main())
    assert engine.remove_imm_count(imm) is None  # the cancelled wait removed its expectation


def test_bouncing_recvs_async(peer, provider):
    # A private engine: the shared one may hold receive buffers posted by other tests.
    e = fl.TransferEngine(**engine_options(provider))
    try:
        async def main():
            queue = e.bouncing_recvs_async(2, 128)
            loop = asyncio.get_running_loop()
            for text in (b"one", b"two", b"three"):
                assert await loop.run_in_executor(None, peer.call, "send", e.main_address, text) == "ok"
            return sorted([await asyncio.wait_for(queue.get(), 10) for _ in range(3)])

        assert asyncio.run(main()) == [b"one", b"three", b"two"]
    finally:
        e.stop()


@contextlib.contextmanager
def _callback_thread_held(engine, peer):
    """Holds the engine's callback thread inside a write's callback until the block ends; yields a
    check that the hold is still in place. The source and target stay registered meanwhile."""
    src = arrays.filled(4096, 5)
    handle, _ = engine.register_tensor(src)
    dst = peer.call("alloc", "held_callback_dst", 4096)
    blocked, release, finished = threading.Event(), threading.Event(), threading.Event()

    def hold() -> None:
        blocked.set()
        release.wait(60)  # bounded: never a hang
        finished.set()

    engine.submit_write(handle, 0, 4096, None, dst, 0, hold, None)
    assert blocked.wait(20)
    try:
        yield lambda: not release.is_set() and not finished.is_set()
    finally:
        release.set()
    assert finished.wait(20)
    engine.unregister_memory(handle)


def test_async_completions_do_not_wait_behind_a_blocked_callback(engine, peer, imms):
    """An asyncio form's completion is queued for its loop by the thread that ends the operation:
    a callback that holds the engine's callback thread does not hold it up."""
    src = arrays.filled(4096, 6)
    handle, _ = engine.register_tensor(src)
    dst = peer.call("alloc", "async_slow_dst", 4096)
    w = imms()

    async def main() -> None:
        await asyncio.wait_for(engine.write_async(handle, 0, 4096, w, dst, 0), 20)

    with _callback_thread_held(engine, peer) as still_held:
        asyncio.run(main())  # completes while the callback thread is still held
        assert still_held()
    assert peer.call("wait_imms", w, fl.imm_count_of_write(4096, engine.nets_per_gpu), 10.0)[0]
    assert peer.call("read", "async_slow_dst") == arrays.pattern(4096, 6).tobytes()
    engine.unregister_memory(handle)


def test_wait_imm_count_does_not_wait_behind_a_blocked_callback(engine, peer, imms):
    """wait_imm_count is settled by the thread that counts the last imm, and a timed-out one by the
    timer: neither waits for the engine's callback thread."""
    _, desc = engine.register_tensor(arrays.zeros(64))
    arrived, partial = imms(), imms()

    async def main() -> None:
        waiter = asyncio.ensure_future(engine.wait_imm_count(arrived, 2, timeout=30))
        loop = asyncio.get_running_loop()
        assert await loop.run_in_executor(None, peer.call, "imms_to", desc, arrived, 2) == ["ok"] * 2
        await asyncio.wait_for(waiter, 20)
        with pytest.raises(fl.DeadlineExceededError):  # none arrive: the deadline ends it
            await asyncio.wait_for(engine.wait_imm_count(partial, 1, timeout=0.2), 20)

    with _callback_thread_held(engine, peer) as still_held:
        asyncio.run(main())
        assert still_held()
    assert engine.imm_count(arrived) == 0 and engine.imm_count(partial) == 0  # consumed; none came
    engine.remove_imm_count(arrived)
    engine.remove_imm_count(partial)


class _LoopWithoutReaders(asyncio.SelectorEventLoop):
    def add_reader(self, fd, callback, *args):  # type: ignore[override]
        raise NotImplementedError


def test_many_async_writes_on_one_loop_and_on_a_loop_without_readers(engine, peer, imms):
    n = 200
    src = arrays.filled(n * 1024, 9)
    handle, _ = engine.register_tensor(src)
    dst = peer.call("alloc", "async_many_dst", n * 1024)
    first, second = imms(), imms()

    async def writes(imm: int) -> None:
        await asyncio.gather(*(engine.write_async(handle, k * 1024, 1024, imm, dst, k * 1024) for k in range(n)))

    asyncio.run(writes(first))  # every future settles once (gather would hang or raise otherwise)
    loop = _LoopWithoutReaders()
    try:
        loop.run_until_complete(writes(second))  # through call_soon_threadsafe instead
    finally:
        loop.close()
    per_write = fl.imm_count_of_write(1024, engine.nets_per_gpu)
    assert peer.call("wait_imms", first, n * per_write, 10.0)[0]
    assert peer.call("wait_imms", second, n * per_write, 10.0)[0]
    assert peer.call("read", "async_many_dst") == arrays.pattern(n * 1024, 9).tobytes()
    engine.unregister_memory(handle)


def test_event_loops_do_not_keep_their_completion_fds(engine, peer):
    """Each loop's completion queue (an eventfd) goes with its loop."""
    src = arrays.filled(64, 3)
    handle, _ = engine.register_tensor(src)
    dst = peer.call("alloc", "async_fd_dst", 64)

    async def one() -> None:
        await engine.write_async(handle, 0, 64, None, dst, 0)

    def open_fds() -> int:
        gc.collect()
        return len(os.listdir("/proc/self/fd"))

    asyncio.run(one())
    before = open_fds()
    for _ in range(50):
        asyncio.run(one())
    assert open_fds() <= before + 5  # one eventfd kept per loop would be 50 more
    engine.unregister_memory(handle)

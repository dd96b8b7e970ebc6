"""The engine's request forms between two processes (tcp, shm, ipc; two domains each): prepared
paged writes and scatters reused with changing pages, slices and imms; repeating imm expectations
with early arrivals and many rounds; cancel by id; sends from and receives into registered
memory; and their bad input. Bytes are compared with a local shadow, imm counts exactly."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

import arrays
import fabric_lib as fl
from peer import Peer, engine_options
from waiters import QUIET_S, Completion, Completions, wait_until


@pytest.fixture()
def own_pair(provider):
    """A fresh engine and peer process: receive buffers posted by other tests (on the shared
    ones) would take messages of this test."""
    mine = fl.TransferEngine(**engine_options(provider))
    theirs = Peer(provider)
    yield mine, theirs
    theirs.close()
    mine.stop()


def register_filled(engine, nbytes: int, seed: int):
    arr = arrays.filled(nbytes, seed)
    handle, desc = engine.register_tensor(arr)
    return arr, handle, desc


def test_prepared_paged_writes_reused_with_changing_pages_and_imms(engine, peer, imms):
    page, src_stride, dst_stride, src_off, dst_off = 512, 576, 640, 8, 24
    src_pages, dst_pages, batch, submits = 40, 96, 16, 640
    src_len, dst_len = src_off + src_pages * src_stride, dst_off + dst_pages * dst_stride
    arr, handle, _ = register_filled(engine, src_len, seed=17)
    name = f"pp{imms()}"
    dst = peer.call("alloc", name, dst_len)
    prepared = engine.prepare_paged_writes(page, handle, src_stride, src_off, dst, dst_stride, dst_off, src_pages, dst_pages)
    assert (prepared.page_length, prepared.src_page_bound, prepared.dst_page_bound) == (page, src_pages, dst_pages)
    pattern = arrays.pattern(src_len, 17)
    shadow = np.zeros(dst_len, dtype=np.uint8)
    imm_values = [imms(), imms(), imms()]
    expected = {v: 0 for v in imm_values}
    rng = np.random.default_rng(5)
    for begin in range(0, submits, batch):
        done = Completions(batch)
        free = rng.permutation(dst_pages)  # destinations of one batch never overlap
        used = 0
        for k in range(batch):
            n = int(rng.integers(1, 5))
            s = [int(x) for x in rng.integers(0, src_pages, n)]
            d = [int(x) for x in free[used : used + n]]
            used += n
            for sp, dp in zip(s, d):
                shadow[dst_off + dp * dst_stride : dst_off + dp * dst_stride + page] = pattern[src_off + sp * src_stride : src_off + sp * src_stride + page]
            imm = imm_values[(begin + k) % 3]
            expected[imm] += fl.imm_count_of_paged_writes(n)
            pages = fl.PageIndices(s) if k % 2 else s  # either form of page list
            engine.submit_prepared_paged_writes(prepared, pages, d, imm, *done.callbacks(k))
        done.wait_ok()
    for imm, n in expected.items():
        assert peer.call("wait_imms", imm, n, 20.0) == (True, 0), imm
    assert peer.call("read", name) == shadow.tobytes()
    engine.unregister_memory(handle)


def test_prepared_scatter_reused_with_changing_slices(engine, peer, imms):
    window, slots, submits = 64 << 10, 4, 48
    slot = window // slots
    names = [f"ps{imms()}", f"ps{imms()}"]
    descs = [peer.call("alloc", n, 2 * window) for n in names]
    group = engine.add_peer_group(descs)
    arr, handle, _ = register_filled(engine, 3 * window, seed=23)
    pattern = arrays.pattern(3 * window, 23)
    targets = [fl.PreparedScatterTarget(0, 0, window, 0, window),
               fl.PreparedScatterTarget(1, window, window, window, window),
               fl.PreparedScatterTarget(0, 2 * window, window, window, window)]
    shadows = [np.zeros(2 * window, dtype=np.uint8) for _ in names]
    rng = np.random.default_rng(9)
    for by_bytes in (False, True):
        prepared = engine.prepare_scatter(handle, group, targets, by_bytes=by_bytes)
        assert len(prepared) == 3 and prepared.targets[2].dst_offset == window
        imm = imms()
        expected = [0, 0]  # per destination region
        for begin in range(0, submits, slots):
            done = Completions(slots)
            for k in range(slots):
                slices = []
                for t in targets:
                    length = int(rng.integers(0, slot + 1))
                    in_src = int(rng.integers(0, window - length + 1))
                    in_dst = k * slot + int(rng.integers(0, slot - length + 1))
                    slices.append(fl.ScatterSlice(length, in_src, in_dst))
                    o = t.dst_offset + in_dst
                    shadows[t.peer][o : o + length] = pattern[t.src_offset + in_src : t.src_offset + in_src + length]
                    expected[t.peer] += fl.imm_count_of_scatter_target(length, engine.nets_per_gpu, by_bytes)
                engine.submit_prepared_scatter(prepared, slices, imm, *done.callbacks(k))
            done.wait_ok()
        # Both destination regions belong to the one peer process: it counts the sum, exactly.
        assert peer.call("wait_imms", imm, sum(expected), 20.0) == (True, 0), by_bytes
    for n, shadow in zip(names, shadows):
        assert peer.call("read", n) == shadow.tobytes(), n
    engine.unregister_memory(handle)


def settled_count(peer, imm: int) -> int:
    """The peer's count of `imm` once it held still for three reads 30 ms apart (bounded)."""
    last, still = peer.call("imm_count", imm), 0
    for _ in range(200):
        if still >= 3:
            return last
        time.sleep(0.03)  # a poll interval of a remote count, not a synchronisation
        now = peer.call("imm_count", imm)
        still = still + 1 if now == last else 0
        last = now
    raise AssertionError(f"the count of imm {imm} kept changing")


def test_repeating_expectation_with_early_arrivals_and_many_rounds(engine, peer, imm):
    n = 7
    inbox = peer.call("alloc", f"rep{imm}", 4096)
    arr, handle, _ = register_filled(engine, 4096, seed=3)
    prepared = engine.prepare_paged_writes(64, handle, 64, 0, inbox, 64, 0, 64, 64)

    def send(imms: int) -> None:  # exactly `imms` imms, as imm-only requests and prepared pages
        requests = []  # page counts; 0: an imm-only request
        while imms > 0:
            pages = 0 if len(requests) % 3 == 2 else min(imms, 5)
            requests.append(pages)
            imms -= fl.imm_count_of_paged_writes(pages) if pages else fl.IMM_COUNT_OF_IMM_ONLY
        done = Completions(len(requests))
        for i, pages in enumerate(requests):
            if pages == 0:
                engine.submit_imm(imm, inbox, *done.callbacks(i))
            else:
                engine.submit_prepared_paged_writes(prepared, range(pages), range(pages), imm, *done.callbacks(i))
        done.wait_ok()

    send(2 * n + 3)  # before anybody expects them
    assert peer.call("wait_count", imm, 2 * n + 3, 20.0) == 2 * n + 3
    peer.call("every", imm, n)
    assert peer.call("wait_rounds", imm, 2, 20.0)
    rounds, count, seen, end = peer.call("every_status", imm)
    assert (rounds, count, seen, end) == (2, 3, [1, 2], None)
    with pytest.raises(RuntimeError, match="AlreadyExistsError"):
        peer.call("every", imm, 1)
    send(40 * n - 3)
    assert peer.call("wait_rounds", imm, 42, 30.0)
    time.sleep(QUIET_S)  # no extra round shows up within the quiet interval
    rounds, count, seen, end = peer.call("every_status", imm)
    assert rounds == 42 and count == 0 and seen == list(range(1, 43)) and end is None
    assert peer.call("remove_imm_count", imm) == (0, n)
    assert wait_until(lambda: peer.call("every_status", imm)[3] is not None)
    rounds, count, seen, end = peer.call("every_status", imm)
    assert end == ("cancelled", 42) and rounds == 0 and len(seen) == 42
    engine.unregister_memory(handle)


def test_cancel_after_completion_during_and_of_unknown_ids(engine, peer, imms):
    pages, page = 1024, 4096
    arr, handle, _ = register_filled(engine, pages * page, seed=29)
    name = f"c{imms()}"
    dst = peer.call("alloc", name, pages * page)
    # After completion: NotFoundError, and the one on_done stays the only completion.
    done = Completion()
    imm = imms()
    tid = engine.submit_write(handle, 0, 4096, imm, dst, 0, done.on_done, done.on_error)
    done.wait_ok()
    with pytest.raises(fl.NotFoundError):
        engine.cancel(tid)
    for never in (0, tid + (1 << 40)):
        with pytest.raises(fl.NotFoundError):
            engine.cancel(never)
    assert peer.call("wait_imms", imm, 1, 10.0) == (True, 0)
    done.expect_exactly_once()
    # During: exactly once, CancelledError when the cancel took effect, Ok when it came too late;
    # the peer's count settles at no more than the request's imm count.
    prepared = engine.prepare_paged_writes(page, handle, page, 0, dst, page, 0, pages, pages)
    perm = [(7 * p) % pages for p in range(pages)]
    for attempt in range(4):
        imm = imms()
        done = Completion()
        tid = engine.submit_prepared_paged_writes(prepared, perm, perm, imm, done.on_done, done.on_error)
        try:
            engine.cancel(tid)
            took_effect = True
        except fl.NotFoundError:
            took_effect = False
        assert done.wait(30)
        done.expect_exactly_once()
        if took_effect:
            assert done.error_codes() == ["cancelled"]
            assert settled_count(peer, imm) <= fl.imm_count_of_paged_writes(pages)
            peer.call("remove_imm_count", imm)  # as an app does before reusing the imm
        else:
            assert done.done == 1
            assert peer.call("wait_imms", imm, pages, 20.0) == (True, 0)
    engine.unregister_memory(handle)


def test_cancel_after_stop_raises_stopped(fresh_engine):
    fresh_engine.stop()
    with pytest.raises(fl.StoppedError):
        fresh_engine.cancel(1)


def test_send_from_registered_memory_reused_after_completion(own_pair):
    engine, peer = own_pair
    sizes = [1, 100, 4096, 65536]
    src = arrays.zeros(65536)
    handle, _ = engine.register_tensor(src)
    peer.call("post_recvs", 8, 65536)
    sent = []
    for i in range(24):
        n = sizes[i % len(sizes)]
        src[:n] = arrays.from_numpy(arrays.pattern(n, 400 + i))  # rewritten only after the last send completed
        sent.append(arrays.pattern(n, 400 + i).tobytes())
        done = Completion()
        engine.submit_send_from(peer.address, handle, 0, n, done.on_done, done.on_error)
        done.wait_ok()
        src[:] = 0xEE  # scribbled over at once: the message must already be out
    got = peer.call("take_messages", len(sent), 20.0)
    assert sorted(got) == sorted(sent)
    engine.unregister_memory(handle)


def test_receives_into_registered_memory_both_ways(own_pair, imms):
    engine, peer = own_pair
    slot, slots, offset = 4096, 4, 1024
    name = f"ri{imms()}"
    peer.call("alloc", name, offset + slot * slots)
    peer.call("recvs_into", name, offset, slot, slots)
    messages = [arrays.pattern(n, 600 + n).tobytes() for n in (0, 1, 300, 4096, 2000, 17, 4096, 5, 6, 7)]
    done = Completions(len(messages))
    for i, m in enumerate(messages):  # more messages than slots: slots are reposted after each callback
        engine.submit_send(peer.address, m, *done.callbacks(i))
    done.wait_ok()
    landed = peer.call("take_landed", len(messages), 20.0)
    assert sorted(b for _, b in landed) == sorted(messages)
    assert all(offset <= off < offset + slot * slots and (off - offset) % slot == 0 for off, _ in landed)

    # The other way: the peer's zero-copy sends land in our region.
    inbox = arrays.zeros(512 + 3 * 8192)
    handle, _ = engine.register_tensor(inbox)
    got = []

    def on_recv(off: int, length: int) -> None:
        got.append((off, arrays.to_numpy(inbox)[off : off + length].tobytes()))

    engine.submit_recvs_into(handle, 512, 8192, 3, on_recv)
    sizes = [8192, 1, 5000, 100, 8000, 3]
    src_name = f"rs{imms()}"
    peer.call("alloc", src_name, 8192)
    assert peer.call("send_from", engine.main_address, src_name, 0, sizes, 800) == ["ok"] * len(sizes)
    assert wait_until(lambda: len(got) == len(sizes), timeout=20)
    assert sorted(b for _, b in got) == sorted(arrays.pattern(n, 800 + i).tobytes() for i, n in enumerate(sizes))
    assert all(512 <= off < 512 + 3 * 8192 and (off - 512) % 8192 == 0 for off, _ in got)


def test_async_forms(own_pair, imms):
    engine, peer = own_pair  # its receive buffers must not stay posted on the shared peer
    arr, handle, _ = register_filled(engine, 8192, seed=31)
    name = f"af{imms()}"
    dst = peer.call("alloc", name, 8192)
    prepared = engine.prepare_paged_writes(1024, handle, 1024, 0, dst, 1024, 0, 8, 8)
    group = engine.add_peer_group([dst])
    scatter = engine.prepare_scatter(handle, group, [fl.PreparedScatterTarget(0, 0, 4096, 4096, 4096)])
    p, s = imms(), imms()
    peer.call("post_recvs", 1, 64)

    async def main():
        await engine.prepared_paged_writes_async(prepared, [7, 0], [0, 1], p)
        await engine.prepared_scatter_async(scatter, [fl.ScatterSlice(4096)], s)
        arr[:5] = arrays.from_numpy(np.frombuffer(b"hello", dtype=np.uint8))
        await engine.send_from_async(peer.address, handle, 0, 5)
        with pytest.raises(fl.OutOfRangeError):
            await engine.prepared_paged_writes_async(prepared, [8], [0], p)

    asyncio.run(main())
    assert peer.call("wait_imms", p, 2, 10.0) == (True, 0)
    assert peer.call("wait_imms", s, 1, 10.0) == (True, 0)
    assert peer.call("take_messages", 1, 10.0) == [b"hello"]
    pattern = arrays.pattern(8192, 31)
    expect = np.zeros(8192, dtype=np.uint8)
    expect[0:1024] = pattern[7 * 1024 : 8 * 1024]
    expect[1024:2048] = pattern[0:1024]
    expect[4096:8192] = pattern[0:4096]
    assert peer.call("read", name) == expect.tobytes()
    engine.unregister_memory(handle)


def test_forms_bad_input(engine, peer, fresh_engine):
    arr, handle, _ = register_filled(engine, 8192, seed=1)
    dst = peer.call("alloc", "forms_bad", 8192)
    prepared = engine.prepare_paged_writes(1024, handle, 1024, 0, dst, 1024, 0, 8, 8)
    with pytest.raises(fl.OutOfRangeError):
        engine.submit_prepared_paged_writes(prepared, [8], [0], 1)
    with pytest.raises(fl.OutOfRangeError):
        engine.submit_prepared_paged_writes(prepared, [0], [8], 1)
    with pytest.raises(fl.InvalidArgumentError):
        engine.submit_prepared_paged_writes(prepared, [0, 1], [0], 1)
    with pytest.raises(fl.InvalidArgumentError, match="another engine"):
        fresh_engine.submit_prepared_paged_writes(prepared, [0], [0], 1)
    with pytest.raises(fl.OutOfRangeError):  # page 8 would end past the 8 KiB source
        engine.prepare_paged_writes(1024, handle, 1024, 0, dst, 1024, 0, 9, 8)
    with pytest.raises(ValueError):
        engine.prepare_paged_writes(1024, handle, 1024, 0, dst, 1024, 0, 0, 8)
    group = engine.add_peer_group([dst])
    scatter = engine.prepare_scatter(handle, group, [fl.PreparedScatterTarget(0, 0, 4096, 0, 4096)])
    with pytest.raises(fl.InvalidArgumentError):
        engine.submit_prepared_scatter(scatter, [fl.ScatterSlice(1), fl.ScatterSlice(1)], 1)
    with pytest.raises(fl.OutOfRangeError):
        engine.submit_prepared_scatter(scatter, [fl.ScatterSlice(100, 4000)], 1)
    with pytest.raises(fl.InvalidArgumentError):
        engine.prepare_scatter(handle, group, [fl.PreparedScatterTarget(1, 0, 4096, 0, 4096)])
    with pytest.raises(fl.OutOfRangeError):
        engine.prepare_scatter(handle, group, [fl.PreparedScatterTarget(0, 0, 8193, 0, 4096)])
    with pytest.raises(fl.InvalidArgumentError, match="another engine"):
        fresh_engine.prepare_scatter(fresh_engine.register_tensor(arrays.zeros(64))[0], group,
                                     [fl.PreparedScatterTarget(0, 0, 64, 0, 64)])
    with pytest.raises(fl.NotFoundError):
        engine.cancel(0)
    with pytest.raises(fl.OutOfRangeError):
        engine.submit_send_from(peer.address, handle, 8000, 500)
    with pytest.raises(TypeError):
        engine.set_imm_count_every(1, 1, None)
    with pytest.raises(ValueError):
        engine.set_imm_count_every(1, 0, print)
    # A prepared request whose source was unregistered: NotFoundError.
    engine.unregister_memory(handle)
    with pytest.raises(fl.NotFoundError):
        engine.submit_prepared_paged_writes(prepared, [0], [0], 1)
    with pytest.raises(fl.NotFoundError):
        engine.submit_prepared_scatter(scatter, [fl.ScatterSlice(1)], 1)


def test_progress_on_the_callers_thread_completes_each_write_once(engine, peer, imms):
    """Spinning on progress() while writes are in flight: every write completes once, the peer
    counts every imm once, and progress() reports a non-negative event count."""
    n, size = 64, 4096
    arr, handle, _ = register_filled(engine, n * size, seed=31)
    name = f"p{imms()}"
    dst = peer.call("alloc", name, n * size)
    imm = imms()
    done = Completions(n)
    handled = 0
    for i in range(n):
        engine.submit_write(handle, i * size, size, imm, dst, i * size, *done.callbacks(i))
        deadline = time.monotonic() + 10.0
        while done.finished <= i and time.monotonic() < deadline:
            got = engine.progress()
            assert isinstance(got, int) and got >= 0
            handled += got
    done.wait_ok()
    assert peer.call("wait_imms", imm, n, 10.0) == (True, 0)
    assert handled <= 4 * n


def test_progress_after_stop_raises_stopped(fresh_engine):
    fresh_engine.stop()
    with pytest.raises(fl.StoppedError):
        fresh_engine.progress()

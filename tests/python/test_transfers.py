"""Two processes, tcp and shm, two domains each: every transfer kind moves backend arrays
(numpy or torch, see arrays.py); the peer verifies bytes and imm counts."""

from __future__ import annotations

import time

import numpy as np
import pytest

import arrays
import fabric_lib as fl
from waiters import QUIET_S, WAIT_S, Completion, Completions


def register_filled(engine, nbytes: int, seed: int):
    arr = arrays.filled(nbytes, seed)
    handle, desc = engine.register_tensor(arr)
    return arr, handle, desc


@pytest.mark.parametrize("nbytes", [1, 4096 + 1, 1 << 20 | 5])
def test_write_with_imm_moves_bytes_and_counts_imms(engine, peer, imm, nbytes):
    arr, handle, _ = register_filled(engine, nbytes, seed=nbytes)
    dst = peer.call("alloc", f"w{imm}", nbytes)
    assert isinstance(dst, fl.MemoryRegionDescriptor) and dst.length == nbytes
    done = Completion()
    engine.submit_write(handle, 0, nbytes, imm, dst, 0, done.on_done, done.on_error)
    done.wait_ok()
    expected = fl.imm_count_of_write(nbytes, engine.nets_per_gpu)
    assert expected == (2 if nbytes > (128 << 10) else 1)
    reached, left = peer.call("wait_imms", imm, expected, 10.0)
    assert reached and left == 0
    assert peer.call("read", f"w{imm}") == arrays.pattern(nbytes, nbytes).tobytes()
    engine.unregister_memory(handle)


def test_write_with_offsets_and_one_shard(engine, peer, imm):
    src_len, dst_len, length = 400_000, 500_000, 300_000
    arr, handle, _ = register_filled(engine, src_len, seed=7)
    dst = peer.call("alloc", f"o{imm}", dst_len)
    done = Completion()
    engine.submit_write(handle, 100, length, imm, dst, 4096 + 7, done.on_done, done.on_error, num_shards=1)
    done.wait_ok()
    assert fl.imm_count_of_write(length, engine.nets_per_gpu, num_shards=1) == 1
    reached, left = peer.call("wait_imms", imm, 1, 10.0)
    assert reached and left == 0
    expect = np.zeros(dst_len, dtype=np.uint8)
    expect[4096 + 7 : 4096 + 7 + length] = arrays.pattern(src_len, 7)[100 : 100 + length]
    assert peer.call("read", f"o{imm}") == expect.tobytes()
    engine.unregister_memory(handle)


def test_write_pinned_to_a_domain_and_without_imm(engine, peer, imm):
    n = 256 << 10
    arr, handle, _ = register_filled(engine, n, seed=3)
    dst = peer.call("alloc", f"p{imm}", n)
    done = Completions(2)
    engine.submit_write(handle, 0, n // 2, None, dst, 0, *done.callbacks(0))  # no imm
    engine.submit_write(handle, n // 2, n // 2, imm, dst, n // 2, *done.callbacks(1), domain=1)
    done.wait_ok()
    assert fl.imm_count_of_write(n // 2, engine.nets_per_gpu, domain=1) == 1
    reached, left = peer.call("wait_imms", imm, 1, 10.0)
    assert reached and left == 0  # after the quiet interval: the imm-less write delivered none
    assert peer.call("read", f"p{imm}") == arrays.pattern(n, 3).tobytes()
    engine.unregister_memory(handle)


@pytest.mark.parametrize("page", [4096, 1000])
def test_paged_writes_permuted_pages(engine, peer, imm, page):
    pages = 24
    src_stride, dst_stride = page + 64, page + 128
    src_offset, dst_offset = 32, 16
    src_len = src_offset + pages * src_stride
    dst_len = dst_offset + pages * dst_stride
    arr, handle, _ = register_filled(engine, src_len, seed=page)
    dst = peer.call("alloc", f"pg{imm}", dst_len)
    rng = np.random.default_rng(page)
    src_pages = rng.permutation(pages)[:20]
    dst_pages = rng.permutation(pages)[:20]
    done = Completion()
    engine.submit_paged_writes(page, handle, fl.PageIndices(src_pages), src_stride, src_offset, dst,
                               dst_pages.tolist(), dst_stride, dst_offset, imm, done.on_done, done.on_error)
    done.wait_ok()
    assert fl.imm_count_of_paged_writes(len(src_pages)) == 20
    reached, left = peer.call("wait_imms", imm, 20, 10.0)
    assert reached and left == 0
    src = arrays.pattern(src_len, page)
    expect = np.zeros(dst_len, dtype=np.uint8)
    for s, d in zip(src_pages, dst_pages):
        expect[dst_offset + d * dst_stride : dst_offset + d * dst_stride + page] = \
            src[src_offset + s * src_stride : src_offset + s * src_stride + page]
    assert peer.call("read", f"pg{imm}") == expect.tobytes()
    engine.unregister_memory(handle)


@pytest.mark.parametrize("by_bytes,use_group", [(False, False), (True, False), (False, True)])
def test_scatter_to_two_regions(engine, peer, imm, by_bytes, use_group):
    lengths = [300_000, 5000]
    src_len = sum(lengths) + 10
    arr, handle, _ = register_filled(engine, src_len, seed=11)
    descs = [peer.call("alloc", f"s{imm}_{i}", n + 100) for i, n in enumerate(lengths)]
    targets, offset = [], 10
    for i, n in enumerate(lengths):
        if use_group:
            targets.append(fl.ScatterTarget(n, src_offset=offset, dst_offset=100, peer=i))
        else:
            targets.append(fl.ScatterTarget(n, src_offset=offset, dst_offset=100, dst_mr=descs[i]))
        offset += n
    group = engine.add_peer_group(descs) if use_group else None
    if group is not None:
        assert len(group) == 2 and group[1] == descs[1]
    done = Completion()
    engine.submit_scatter(handle, targets, imm, done.on_done, done.on_error, by_bytes=by_bytes, peer_group=group)
    done.wait_ok()
    expected = sum(fl.imm_count_of_scatter_target(n, engine.nets_per_gpu, by_bytes=by_bytes) for n in lengths)
    assert expected == (3 if by_bytes else 2)
    reached, left = peer.call("wait_imms", imm, expected, 10.0)
    assert reached and left == 0
    src = arrays.pattern(src_len, 11)
    offset = 10
    for i, n in enumerate(lengths):
        expect = np.zeros(n + 100, dtype=np.uint8)
        expect[100:] = src[offset : offset + n]
        assert peer.call("read", f"s{imm}_{i}") == expect.tobytes()
        offset += n
    engine.unregister_memory(handle)


def test_barrier_and_imm_only(engine, peer, imms):
    descs = [peer.call("alloc", f"b{i}", 64) for i in range(3)]
    barrier, single = imms(), imms()
    done = Completions(2)
    engine.submit_barrier(barrier, descs, *done.callbacks(0))
    engine.submit_imm(single, descs[0], *done.callbacks(1))
    done.wait_ok()
    reached, left = peer.call("wait_imms", barrier, 3 * fl.IMM_COUNT_OF_BARRIER_PER_PEER, 10.0)
    assert reached and left == 0
    reached, left = peer.call("wait_imms", single, fl.IMM_COUNT_OF_IMM_ONLY, 10.0)
    assert reached and left == 0


def test_expectation_set_after_arrival_counts_early_imms(engine, peer, imm):
    dst = peer.call("alloc", f"e{imm}", 64)
    done = Completions(3)
    for i in range(3):
        engine.submit_imm(imm, dst, *done.callbacks(i))
    done.wait_ok()
    before, reached, after = peer.call("expect_after_arrival", imm, 3, 2, 10.0)
    assert (before, reached, after) == (3, True, 1)  # fired at once, consumed 2, 1 stays
    assert peer.call("remove_imm_count", imm) == (1, 0)
    assert peer.call("imm_count", imm) == 0
    assert peer.call("remove_imm_count", imm) is None


def test_imm_callback_observes_without_changing_counts(engine, peer, imms):
    dst = peer.call("alloc", "obs", 64)
    peer.call("observe")
    values = [imms(), imms(), imms()]
    done = Completions(len(values))
    for i, v in enumerate(values):
        engine.submit_imm(v, dst, *done.callbacks(i))
    done.wait_ok()
    for v in values:
        reached, left = peer.call("wait_imms", v, 1, 10.0)
        assert reached and left == 0
    assert sorted(peer.call("take_observed", len(values), 10.0)) == sorted(values)
    assert peer.call("take_observed", 1, QUIET_S) == []  # each observed once


def test_descriptor_pickled_to_the_peer_which_writes_back(engine, peer, imm):
    n = 200_000
    inbox = arrays.zeros(n)
    handle, desc = engine.register_tensor(inbox)
    peer.call("alloc", f"src{imm}", n, 99)
    reached = Completion()
    engine.set_imm_count_expected(imm, fl.imm_count_of_write(n, engine.nets_per_gpu), reached.on_done, reached.on_error)
    assert peer.call("write_to", f"src{imm}", desc, imm) == "ok"
    reached.wait_ok()
    assert arrays.to_numpy(inbox).tobytes() == arrays.pattern(n, 99).tobytes()
    engine.unregister_memory(handle)


def test_send_and_bouncing_recvs_both_ways(engine, peer):
    peer.call("post_recvs", 4, 1024)
    payloads = [b"hello", bytes(range(256)) * 4, arrays.pattern(100, 5).tobytes()]
    done = Completions(len(payloads) + 1)
    for i, p in enumerate(payloads):
        engine.submit_send(peer.address, p, *done.callbacks(i))
    engine.submit_send(peer.address, np.arange(10, dtype=np.int32), *done.callbacks(len(payloads)))  # any buffer
    done.wait_ok()
    got = peer.call("take_messages", 4, 10.0)
    assert sorted(got) == sorted(payloads + [np.arange(10, dtype=np.int32).tobytes()])
    assert peer.call("take_messages", 1, QUIET_S) == []  # none arrived twice

    received = []
    import threading

    arrived = threading.Event()

    def on_recv(message: bytes) -> None:
        received.append(message)
        if len(received) == 2:
            arrived.set()

    engine.submit_bouncing_recvs(2, 512, on_recv)
    assert peer.call("send", engine.main_address, b"ping") == "ok"
    assert peer.call("send", engine.main_address, b"pong" * 100) == "ok"
    assert arrived.wait(WAIT_S)
    time.sleep(QUIET_S)  # then no message more may arrive
    assert sorted(received) == sorted([b"ping", b"pong" * 100])


def test_domain_address_survives_pickling_between_processes(engine, peer):
    assert isinstance(peer.address, fl.DomainAddress)
    assert peer.call("address") == peer.address
    assert peer.address != engine.main_address
    assert fl.DomainAddress.from_str(str(peer.address)) == peer.address

"""torch CUDA tensors between two processes over the ipc provider (the "ipc" step of
scripts/device-test.sh runs this on the GPU machine): the receiver registers a tensor that is a
slice of a larger one (a sub-allocation of torch's caching allocator: the IPC export must use the
allocation's base and the slice's offset), the sender writes a whole tensor and then KV-cache-like pages into it, and
the receiver checks every value once the imms it expects have arrived. GPU 0 -> GPU 1 with two
GPUs, GPU 0 -> GPU 0 (two processes sharing it) with one."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import traceback

import pytest

import fabric_lib as fl

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

DOMAINS = 2
N = (1 << 20) + 3  # float32 values: 4 MiB + 12 bytes, sharded over both domains
PAGES, PAGE_FLOATS = 64, 4096  # 64 pages of 16 KiB
IMM_WHOLE, IMM_PAGES = 42, 43


def _peer_gpu() -> int:
    return 1 if torch.cuda.device_count() >= 2 else 0


def _page_order():
    gen = torch.Generator().manual_seed(5)
    src = torch.randperm(PAGES, generator=gen).tolist()
    dst = torch.randperm(2 * PAGES, generator=gen)[:PAGES].tolist()
    return src, dst


def _receiver(conn) -> None:
    try:
        torch.cuda.set_device(_peer_gpu())
        with fl.TransferEngine(provider="ipc", domains_per_group=DOMAINS) as engine:
            # A slice 4 KiB + 16 bytes into a larger tensor: not the start of its allocation.
            backing = torch.zeros(N * 4 + (8 << 20), dtype=torch.uint8, device="cuda")
            inbox = backing[4096 + 16 : 4096 + 16 + N * 4].view(torch.float32)
            pages = torch.zeros(2 * PAGES, PAGE_FLOATS, dtype=torch.float32, device="cuda")
            _, inbox_desc = engine.register_tensor(inbox)
            _, pages_desc = engine.register_tensor(pages)
            conn.send((inbox_desc, pages_desc))
            n_whole = fl.imm_count_of_write(inbox.nbytes, engine.nets_per_gpu)
            asyncio.run(engine.wait_imm_count(IMM_WHOLE, n_whole, timeout=60))
            whole_ok = bool(torch.equal(inbox, torch.arange(N, dtype=torch.float32, device="cuda")))
            asyncio.run(engine.wait_imm_count(IMM_PAGES, fl.imm_count_of_paged_writes(PAGES), timeout=60))
            src_order, dst_order = _page_order()
            expect = torch.zeros_like(pages)
            source = torch.arange(PAGES * PAGE_FLOATS, dtype=torch.float32, device="cuda").view(PAGES, PAGE_FLOATS) + 0.5
            for s, d in zip(src_order, dst_order):
                expect[d] = source[s]
            pages_ok = bool(torch.equal(pages, expect))
            untouched_ok = bool(torch.count_nonzero(backing[: 4096 + 16]) == 0)
            conn.send(("result", whole_ok, pages_ok, untouched_ok, engine.imm_count(IMM_WHOLE), engine.imm_count(IMM_PAGES)))
            conn.recv()  # stay until the sender is done
    except Exception:  # noqa: BLE001 (report anything to the test)
        conn.send(("error", traceback.format_exc()))


def _sender(conn) -> None:
    try:
        torch.cuda.set_device(0)
        with fl.TransferEngine(provider="ipc", domains_per_group=DOMAINS) as engine:
            inbox_desc, pages_desc = conn.recv()
            data = torch.arange(N, dtype=torch.float32, device="cuda")
            source = torch.arange(PAGES * PAGE_FLOATS, dtype=torch.float32, device="cuda").view(PAGES, PAGE_FLOATS) + 0.5
            torch.cuda.synchronize()  # the producing kernels are done before the transfer starts
            data_handle, _ = engine.register_tensor(data)
            source_handle, _ = engine.register_tensor(source)
            asyncio.run(engine.write_async(data_handle, 0, data.nbytes, IMM_WHOLE, inbox_desc, 0))
            src_order, dst_order = _page_order()
            page_bytes = PAGE_FLOATS * 4
            asyncio.run(engine.paged_writes_async(page_bytes, source_handle, src_order, page_bytes, 0, pages_desc,
                                                  dst_order, page_bytes, 0, IMM_PAGES))
            conn.send(("sent",))
            conn.recv()
    except Exception:  # noqa: BLE001
        conn.send(("error", traceback.format_exc()))


def test_torch_tensors_move_between_processes_over_ipc():
    ctx = mp.get_context("spawn")  # CUDA does not survive fork
    recv_parent, recv_child = ctx.Pipe()
    send_parent, send_child = ctx.Pipe()
    procs = [ctx.Process(target=_receiver, args=(recv_child,)), ctx.Process(target=_sender, args=(send_child,))]
    for p in procs:
        p.start()
    try:
        assert recv_parent.poll(120), "the receiver did not register its tensors"
        descs = recv_parent.recv()
        assert descs[0] != "error", descs[1]
        send_parent.send(descs)
        assert send_parent.poll(120), "the sender did not finish"
        sent = send_parent.recv()
        assert sent[0] == "sent", sent[1] if len(sent) > 1 else sent
        assert recv_parent.poll(120), "the receiver did not report"
        result = recv_parent.recv()
        assert result[0] == "result", result[1]
        _, whole_ok, pages_ok, untouched_ok, left_whole, left_pages = result
        assert whole_ok, "the tensor's values differ"
        assert pages_ok, "a page is missing or misplaced"
        assert untouched_ok, "bytes before the registered slice were written"
        assert (left_whole, left_pages) == (0, 0), "more imms arrived than expected"
    finally:
        for conn in (recv_parent, send_parent):
            try:
                conn.send("done")
            except (BrokenPipeError, OSError):
                pass
        for p in procs:
            p.join(60)
            if p.is_alive():
                p.kill()
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]

"""Paged writes over the ipc backend against torch's own page gather, on one machine's GPU(s).

The comparison issue 15 names for the same-host IPC backend: moving N scattered pages of one
4 GiB GPU buffer into scattered pages of another (a KV-cache transfer), by
  - the engine: one paged write of all N pages per request, from one process to another
    (provider "ipc", GPU 0 -> GPU 1 with two GPUs, GPU 0 -> GPU 0 with one), `--window`
    requests in flight; a request is done when its bytes are in the target's memory;
  - torch `index_copy_`: `dst.index_copy_(0, dst_idx, src.index_select(0, src_idx))`, the
    gather-then-scatter a Python KV connector writes without a transfer library (one process,
    same device pair; both kernels timed);
  - torch `copy_` of the same number of bytes, contiguous: the device-copy ceiling.
Buffers are 4 GiB each, well past the 50 MiB L2, so no figure is an L2 figure. Prints one row per
page size with GB/s and the engine's ratio to each baseline, and MET/MISSED for the issue's
target (engine >= 0.9x the contiguous copy) and for beating index_copy_ (>= 1.0x).

Run on the GPU machine (scripts/device-ipc.sh does): PYTHONPATH=<build>/python python3 this.py
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import sys
import time
import traceback

BUFFER_BYTES = 4 << 30


def _parse_size(text: str) -> int:
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    for suffix, mult in units.items():
        if text.endswith(suffix):
            return int(text[: -len(suffix)]) * mult
    return int(text)


def _peer_gpu(torch) -> int:
    return 1 if torch.cuda.device_count() >= 2 else 0


def _indices(torch, pages: int, page_bytes: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    slots = BUFFER_BYTES // page_bytes
    src = torch.randperm(slots, generator=gen)[:pages]
    dst = torch.randperm(slots, generator=gen)[:pages]
    return src, dst


def _receiver(conn, domains: int) -> None:
    try:
        import torch
        import fabric_lib as fl

        torch.cuda.set_device(_peer_gpu(torch))
        with fl.TransferEngine(provider="ipc", domains_per_group=domains) as engine:
            inbox = torch.zeros(BUFFER_BYTES, dtype=torch.uint8, device="cuda")
            _, desc = engine.register_tensor(inbox)
            conn.send(("desc", desc))
            conn.recv()  # stay registered until the sender is done
    except Exception:  # noqa: BLE001 (report anything to the parent)
        conn.send(("error", traceback.format_exc()))


def _engine_rate(fl, engine, src_handle, desc, pages: int, page_bytes: int, window: int, rounds: int, torch) -> float:
    """GB/s of paged writes: `rounds` batches of `window` requests of `pages` pages each."""
    lists = []
    for k in range(window):
        s, d = _indices(torch, pages, page_bytes, seed=100 + k)
        lists.append((fl.PageIndices(s.tolist()), fl.PageIndices(d.tolist())))

    async def batch():
        await asyncio.gather(*(engine.paged_writes_async(page_bytes, src_handle, s, page_bytes, 0, desc, d, page_bytes, 0,
                                                         None) for s, d in lists))

    asyncio.run(batch())  # warm-up: imports, kernels, slabs
    start = time.perf_counter()
    for _ in range(rounds):
        asyncio.run(batch())
    seconds = time.perf_counter() - start
    return rounds * window * pages * page_bytes / seconds / 1e9


def _torch_rates(torch, src, pages: int, page_bytes: int, rounds: int) -> tuple[float, float]:
    """GB/s of index_copy_ (gather + scatter of `pages` pages) and of a contiguous copy_ of as many bytes."""
    device_dst = _peer_gpu(torch)
    dst = torch.empty(BUFFER_BYTES, dtype=torch.uint8, device=f"cuda:{device_dst}")
    s, d = _indices(torch, pages, page_bytes, seed=7)
    s, d = s.to(src.device), d.to(dst.device)
    src_rows, dst_rows = src.view(-1, page_bytes), dst.view(-1, page_bytes)
    nbytes = pages * page_bytes

    def timed(fn) -> float:
        fn()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(rounds):
            fn()
        torch.cuda.synchronize()
        return rounds * nbytes / (time.perf_counter() - start) / 1e9

    gather = timed(lambda: dst_rows.index_copy_(0, d, src_rows.index_select(0, s).to(dst.device)))
    contiguous = timed(lambda: dst[:nbytes].copy_(src[:nbytes], non_blocking=True))
    del dst
    torch.cuda.empty_cache()
    return gather, contiguous


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--page-sizes", default="4KiB,16KiB,64KiB,256KiB")
    parser.add_argument("--pages", type=int, default=4096, help="pages per request (and per torch gather)")
    parser.add_argument("--window", type=int, default=4, help="engine requests in flight")
    parser.add_argument("--domains", default="1,4")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    import torch
    import fabric_lib as fl

    if not torch.cuda.is_available():
        print("ipc_gather_vs_torch: no CUDA device", file=sys.stderr)
        return 2
    page_sizes = [_parse_size(p) for p in args.page_sizes.split(",")]
    print(f"# {args.pages} scattered pages per request over {BUFFER_BYTES >> 30} GiB buffers, "
          f"GPU 0 -> GPU {_peer_gpu(torch)}, window {args.window}, {args.rounds} rounds")
    print("domains,page_bytes,engine_GBps,index_copy_GBps,contiguous_GBps,vs_index_copy,vs_contiguous")
    torch.cuda.set_device(0)
    src = torch.randint(0, 255, (BUFFER_BYTES,), dtype=torch.uint8, device="cuda")
    baselines = {p: _torch_rates(torch, src, args.pages, p, args.rounds) for p in page_sizes}
    missed = 0
    ctx = mp.get_context("spawn")  # CUDA does not survive fork
    for domains in (int(x) for x in args.domains.split(",")):
        parent, child = ctx.Pipe()
        receiver = ctx.Process(target=_receiver, args=(child, domains))
        receiver.start()
        try:
            if not parent.poll(120):
                raise RuntimeError("the receiver did not register its buffer")
            kind, payload = parent.recv()
            if kind == "error":
                raise RuntimeError(payload)
            with fl.TransferEngine(provider="ipc", domains_per_group=domains) as engine:
                handle, _ = engine.register_tensor(src)
                for p in page_sizes:
                    rate = _engine_rate(fl, engine, handle, payload, args.pages, p, args.window, args.rounds, torch)
                    gather, contiguous = baselines[p]
                    vs_gather, vs_contig = rate / gather, rate / contiguous
                    print(f"{domains},{p},{rate:.1f},{gather:.1f},{contiguous:.1f},{vs_gather:.2f},{vs_contig:.2f}")
                    verdict_g = "MET" if vs_gather >= 1.0 else "MISSED"
                    verdict_c = "MET" if vs_contig >= 0.9 else "MISSED"
                    missed += verdict_c == "MISSED"
                    print(f"# x{domains} {p >> 10} KiB pages: beats index_copy_ {verdict_g} ({vs_gather:.2f}x); "
                          f">= 0.9x contiguous copy {verdict_c} ({vs_contig:.2f}x)")
        finally:
            try:
                parent.send("done")
            except (BrokenPipeError, OSError):
                pass
            receiver.join(60)
            if receiver.is_alive():
                receiver.kill()
    print(f"# targets missed: {missed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

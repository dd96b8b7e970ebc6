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
Buffers are 4 GiB each, well past the 50 MiB L2, so no figure is an L2 figure. The receiver checks
every page the engine wrote against the same seeded source (exit 1 when one differs). Prints one row per
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


class Setup:
    """Where the buffers live: GPU memory (the measurement) or, with --smoke, 64 MiB of host
    memory (checks this script's protocol and the byte check on a machine without a GPU; its
    figures mean nothing)."""

    def __init__(self, smoke: bool, buffer_bytes: int) -> None:
        self.smoke = smoke
        self.buffer_bytes = buffer_bytes

    def device(self, torch, peer: bool = False) -> str:
        if self.smoke:
            return "cpu"
        return f"cuda:{_peer_gpu(torch) if peer else 0}"

    def sync(self, torch) -> None:
        if not self.smoke:
            torch.cuda.synchronize()


def _parse_size(text: str) -> int:
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    for suffix, mult in units.items():
        if text.endswith(suffix):
            return int(text[: -len(suffix)]) * mult
    return int(text)


def _peer_gpu(torch) -> int:
    return 1 if torch.cuda.device_count() >= 2 else 0


def _indices(torch, setup: Setup, pages: int, page_bytes: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    slots = setup.buffer_bytes // page_bytes
    if pages > slots:
        raise ValueError(f"{pages} pages of {page_bytes} bytes do not fit in the buffer")
    src = torch.randperm(slots, generator=gen)[:pages]
    dst = torch.randperm(slots, generator=gen)[:pages]
    return src, dst


def _source(torch, setup: Setup, device: str):
    """The sender's bytes; the receiver makes the same ones to check what arrived."""
    gen = torch.Generator(device=device).manual_seed(11)
    return torch.randint(0, 256, (setup.buffer_bytes,), dtype=torch.uint8, device=device, generator=gen)


def _receiver(conn, domains: int, setup: Setup) -> None:
    try:
        import torch
        import fabric_lib as fl

        device = setup.device(torch, peer=True)
        if not setup.smoke:
            torch.cuda.set_device(device)
        with fl.TransferEngine(provider="ipc", domains_per_group=domains) as engine:
            inbox = torch.zeros(setup.buffer_bytes, dtype=torch.uint8, device=device)
            _, desc = engine.register_tensor(inbox)
            expected = _source(torch, setup, device)
            conn.send(("desc", desc))
            while True:  # ("check", page_bytes, [(src pages, dst pages)]) until "done"
                message = conn.recv()
                if message == "done":
                    break
                _, page_bytes, lists = message
                got, want = inbox.view(-1, page_bytes), expected.view(-1, page_bytes)
                same = all(bool(torch.equal(got[torch.tensor(d, device=device)], want[torch.tensor(s, device=device)]))
                           for s, d in lists)
                conn.send(("checked", same))
    except Exception:  # noqa: BLE001 (report anything to the parent)
        conn.send(("error", traceback.format_exc()))


def _engine_rate(fl, engine, src_handle, desc, pages: int, page_bytes: int, window: int, rounds: int, torch,
                 setup: Setup):
    """GB/s of paged writes (`rounds` batches of `window` requests of `pages` pages each), and
    the (src, dst) page lists written, for the receiver to check."""
    lists, plain = [], []
    # Disjoint target pages across the window, so the receiver can tell what each page must hold.
    all_src, all_dst = _indices(torch, setup, pages * window, page_bytes, seed=100)
    for k in range(window):
        s, d = all_src[k * pages : (k + 1) * pages], all_dst[k * pages : (k + 1) * pages]
        plain.append((s.tolist(), d.tolist()))
        lists.append((fl.PageIndices(plain[-1][0]), fl.PageIndices(plain[-1][1])))

    def one(s, d):
        return engine.paged_writes_async(page_bytes, src_handle, s, page_bytes, 0, desc, d, page_bytes, 0, None)

    async def lane(s, d):  # one request in flight at a time, `rounds` times: `window` lanes keep the window full
        for _ in range(rounds):
            await one(s, d)

    async def timed() -> float:
        await asyncio.gather(*(one(s, d) for s, d in lists))  # warm-up: imports, kernels, slabs
        start = time.perf_counter()
        await asyncio.gather(*(lane(s, d) for s, d in lists))
        return time.perf_counter() - start

    # One event loop for the whole measurement: a loop made per round cost the engine's figure
    # its set-up and an idle GPU between rounds (up to ~1 ms a round, as much as a round's copy
    # at 4 KiB pages).
    seconds = asyncio.run(timed())
    return rounds * window * pages * page_bytes / seconds / 1e9, plain


def _torch_rates(torch, setup: Setup, src, pages: int, page_bytes: int, rounds: int) -> tuple[float, float]:
    """GB/s of index_copy_ (gather + scatter of `pages` pages) and of a contiguous copy_ of as many bytes."""
    dst = torch.empty(setup.buffer_bytes, dtype=torch.uint8, device=setup.device(torch, peer=True))
    s, d = _indices(torch, setup, pages, page_bytes, seed=7)
    s, d = s.to(src.device), d.to(dst.device)
    src_rows, dst_rows = src.view(-1, page_bytes), dst.view(-1, page_bytes)
    nbytes = pages * page_bytes

    def timed(fn) -> float:
        fn()
        setup.sync(torch)
        start = time.perf_counter()
        for _ in range(rounds):
            fn()
        setup.sync(torch)
        return rounds * nbytes / (time.perf_counter() - start) / 1e9

    gather = timed(lambda: dst_rows.index_copy_(0, d, src_rows.index_select(0, s).to(dst.device)))
    contiguous = timed(lambda: dst[:nbytes].copy_(src[:nbytes], non_blocking=True))
    del dst
    if not setup.smoke:
        torch.cuda.empty_cache()
    return gather, contiguous


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--page-sizes", default="4KiB,16KiB,64KiB,256KiB")
    parser.add_argument("--pages", type=int, default=4096, help="pages per request (and per torch gather)")
    parser.add_argument("--window", type=int, default=4, help="engine requests in flight")
    parser.add_argument("--domains", default="1,4")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--smoke", action="store_true",
                        help="host memory, 64 MiB buffers: checks the script without a GPU (figures mean nothing)")
    args = parser.parse_args()

    import torch
    import fabric_lib as fl

    setup = Setup(args.smoke, 64 << 20 if args.smoke else BUFFER_BYTES)
    if not args.smoke and not torch.cuda.is_available():
        print("ipc_gather_vs_torch: no CUDA device (--smoke runs on host memory)", file=sys.stderr)
        return 2
    page_sizes = [_parse_size(p) for p in args.page_sizes.split(",")]
    print(f"# {args.pages} scattered pages per request over {setup.buffer_bytes >> 20} MiB buffers, "
          f"{setup.device(torch)} -> {setup.device(torch, peer=True)}, window {args.window}, {args.rounds} rounds")
    print("domains,page_bytes,engine_GBps,index_copy_GBps,contiguous_GBps,vs_index_copy,vs_contiguous")
    if not args.smoke:
        torch.cuda.set_device(0)
    src = _source(torch, setup, setup.device(torch))
    baselines = {p: _torch_rates(torch, setup, src, args.pages, p, args.rounds) for p in page_sizes}
    missed = wrong = 0
    ctx = mp.get_context("spawn")  # CUDA does not survive fork
    for domains in (int(x) for x in args.domains.split(",")):
        parent, child = ctx.Pipe()
        receiver = ctx.Process(target=_receiver, args=(child, domains, setup))
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
                    rate, written = _engine_rate(fl, engine, handle, payload, args.pages, p, args.window, args.rounds,
                                                 torch, setup)
                    parent.send(("check", p, written))
                    if not parent.poll(120):
                        raise RuntimeError("the receiver did not check the pages")
                    kind, same = parent.recv()
                    if kind == "error":
                        raise RuntimeError(same)
                    if not same:
                        wrong += 1
                        print(f"# x{domains} {p >> 10} KiB pages: WRONG BYTES at the target")
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
    print(f"# targets missed: {missed}; page sizes with wrong bytes: {wrong}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())

"""KV transfer end to end on the GPU (scripts/device-kv.sh runs this on the GPU machine): the
tiny attention model of apps/kv/tests/python with its paged KV cache and tail in GPU memory, a
prefiller process and a decoder process on one GPU over the same-host IPC backend (provider
"ipc"). The prefill runs as a CUDA graph replay: after each layer the graph stores
progress_word_value(pass, layer + 1) into the prefiller's UVM watcher word, and the watcher thread
posts that layer's page writes while the GPU computes the next one; the tail (the logits) is
written after the graph's last store. The decoder decodes greedily from what it received; its
tokens must equal a monolithic run of the model on the same GPU. Two requests, two replays: the
graph is reused, only the pass base changes."""

from __future__ import annotations

import multiprocessing as mp
import pathlib
import random
import sys
import traceback

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "python"))

import fabric_lib.kv as kv  # noqa: E402
from kv_tiny_model import DTYPE, HEAD_DIM, KV_HEADS, LAYERS, VOCAB, PagedCache, TinyModel, greedy_decode  # noqa: E402

PAGE_TOKENS = 4
NUM_PAGES = 48
STEPS = 12
PROMPT = [random.Random(7).randrange(VOCAB) for _ in range(23)]
TAIL_BYTES = VOCAB * 8
REQUESTS = ["gpu-a", "gpu-b"]
TIMEOUT = 180


class _Word:
    """A one-element int64 view of a watcher's device pointer, for torch.as_tensor."""

    def __init__(self, ptr: int) -> None:
        self.__cuda_array_interface__ = {"shape": (1,), "typestr": "<i8", "data": (ptr, False), "version": 3}


def layout():
    return kv.KvLayout("gqa", "f64", LAYERS, PAGE_TOKENS, HEAD_DIM, KV_HEADS)


def monolithic_tokens():
    model = TinyModel(device="cuda")
    cache = PagedCache(NUM_PAGES, KV_HEADS, PAGE_TOKENS, device="cuda")
    table = list(range(NUM_PAGES))
    logits = model.forward(PROMPT, 0, table, cache)
    return greedy_decode(model, logits, len(PROMPT), table, cache, STEPS), logits.cpu()


def prefill_process(conn) -> None:
    try:
        torch.cuda.set_device(0)
        model = TinyModel(device="cuda")
        cache = PagedCache(NUM_PAGES, KV_HEADS, PAGE_TOKENS, device="cuda")
        tail = torch.zeros(VOCAB, dtype=DTYPE, device="cuda")
        engine = kv.Engine(provider="ipc")
        memory, size = kv.KvMemoryLayout.contiguous(layout(), 1, "separate", NUM_PAGES)
        assert size == cache.nbytes
        engine.register(cache.buf.data_ptr(), cache.nbytes, cuda=True)
        engine.register(tail.data_ptr(), TAIL_BYTES, cuda=True)
        pre = kv.Prefiller(engine, layout(), 0, 1, memory, regions=[0, 1])
        watcher = pre.attach_progress_watcher()
        word = torch.as_tensor(_Word(watcher.device_ptr), device="cuda")
        conn.send(("address", engine.address))

        # Static inputs of the captured prefill.
        table = torch.tensor(random.Random(3).sample(range(NUM_PAGES), kv.pages_for_tokens(len(PROMPT), PAGE_TOKENS)), device="cuda")
        tokens = torch.tensor(PROMPT, device="cuda")
        pos = torch.arange(len(PROMPT), device="cuda")
        pages, slots = table[pos // PAGE_TOKENS], pos % PAGE_TOKENS
        base = torch.zeros(1, dtype=torch.int64, device="cuda")

        def step():
            logits = model.forward_indexed(tokens, pos, pages, slots, pages, slots, cache,
                                           on_layer=lambda layer: word.copy_(base + (layer + 1)))
            tail.copy_(logits)
            word.copy_(base + (LAYERS + 1))

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up (pass 0: the watcher ignores it)
            step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        torch.cuda.synchronize()

        results = []
        for request_id in REQUESTS:
            assert conn.recv() == ("prefill", request_id)
            pre.add_request(request_id, len(PROMPT), table.tolist(), tail_region=1, tail_offset=0, decode_tp=1)
            pass_id = pre.begin_pass([(request_id, len(PROMPT))])
            base.fill_(kv.Prefiller.progress_word_value(pass_id, 0))
            graph.replay()  # the watcher posts each layer's writes as the graph stores its progress
            finished = []
            while not finished:
                finished = pre.wait_finished(30000)
            results.append((finished[0]["id"], finished[0]["ok"], finished[0]["message"]))
        conn.send(("done", results, pre.stats()))
        conn.recv()
        watcher.close()
        pre.shutdown()
    except Exception:  # noqa: BLE001
        conn.send(("error", traceback.format_exc()))


def decode_process(conn, prefill_address) -> None:
    try:
        torch.cuda.set_device(0)
        model = TinyModel(device="cuda")
        cache = PagedCache(NUM_PAGES, KV_HEADS, PAGE_TOKENS, device="cuda")
        tails = torch.zeros(len(REQUESTS), VOCAB, dtype=DTYPE, device="cuda")
        engine = kv.Engine(provider="ipc")
        memory, _ = kv.KvMemoryLayout.contiguous(layout(), 1, "separate", NUM_PAGES)
        engine.register(cache.buf.data_ptr(), cache.nbytes, cuda=True)
        engine.register(tails.data_ptr(), tails.numel() * 8, cuda=True)
        dec = kv.Decoder(engine, layout(), 0, 1, memory, regions=[0, 1])
        pool = random.Random(5).sample(range(NUM_PAGES), NUM_PAGES)
        out = []
        for r, request_id in enumerate(REQUESTS):
            table = pool[r * 20:(r + 1) * 20]  # prompt pages and room for the decoded tokens
            n = kv.pages_for_tokens(len(PROMPT), PAGE_TOKENS)
            dec.start(request_id, [prefill_address], len(PROMPT), table[:n], tail_region=1, tail_offset=r * TAIL_BYTES,
                      tail_length=TAIL_BYTES, timeout_ms=60000)
            conn.send(("started", request_id))
            finished = []
            while not finished:
                finished = dec.wait_finished(30000)
            if not finished[0]["ok"]:
                conn.send(("failed", finished[0]["message"]))
                return
            out.append((greedy_decode(model, tails[r].clone(), len(PROMPT), table, cache, STEPS), tails[r].cpu()))
        conn.send(("tokens", out))
        conn.recv()
    except Exception:  # noqa: BLE001
        conn.send(("error", traceback.format_exc()))


def _expect(conn, tag):
    assert conn.poll(TIMEOUT), f"no '{tag}' in time"
    msg = conn.recv()
    assert msg[0] == tag, msg[1] if len(msg) > 1 else msg
    return msg


def test_gpu_kv_from_a_cuda_graph_decodes_the_monolithic_tokens():
    want, want_logits = monolithic_tokens()
    assert len(set(want)) >= 6, want
    ctx = mp.get_context("spawn")
    pre_parent, pre_child = ctx.Pipe()
    dec_parent, dec_child = ctx.Pipe()
    pre = ctx.Process(target=prefill_process, args=(pre_child,))
    pre.start()
    procs = [pre]
    try:
        address = _expect(pre_parent, "address")[1]
        dec = ctx.Process(target=decode_process, args=(dec_child, address))
        dec.start()
        procs.append(dec)
        for request_id in REQUESTS:
            _expect(dec_parent, "started")
            pre_parent.send(("prefill", request_id))
        _, results, stats = _expect(pre_parent, "done")
        assert all(ok for _, ok, _ in results), results
        assert stats["pages_posted"] == len(REQUESTS) * LAYERS * 2 * 6, stats
        _, decoded = _expect(dec_parent, "tokens")
        for tokens, logits in decoded:
            assert torch.allclose(logits, want_logits, rtol=1e-9, atol=1e-12)
            assert tokens == want, f"decoded {tokens}, monolithic {want}"
        pre_parent.send("bye")
        dec_parent.send("bye")
    finally:
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()

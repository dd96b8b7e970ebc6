"""End to end, token-identical: prefiller processes prefill a real (tiny) attention model into
their paged KV caches and transfer them through fabric_lib.kv, layer by layer; a decoder process
decodes greedily from the received pages and tail (the prefill's logits). Its tokens must equal a
monolithic run of the same model in one process. Also with prefill TP 2 (two processes, half the
KV heads each, o_proj partials summed across them) -> decode TP 1, and with chunked prefill."""

from __future__ import annotations

import multiprocessing as mp
import random
import traceback

import pytest

torch = pytest.importorskip("torch")

import fabric_lib.kv as kv  # noqa: E402
from kv_tiny_model import KV_HEADS, LAYERS, HEAD_DIM, VOCAB, PagedCache, TinyModel, greedy_decode  # noqa: E402

PAGE_TOKENS = 4
NUM_PAGES = 32
STEPS = 12
PROMPT = [random.Random(7).randrange(VOCAB) for _ in range(23)]  # 6 pages, the last one partial
TAIL_BYTES = VOCAB * 8  # the prefill's last logits, float64
TIMEOUT = 120


def layout():
    return kv.KvLayout("gqa", "f64", LAYERS, PAGE_TOKENS, HEAD_DIM, KV_HEADS)


def _engine():
    return kv.Engine(provider="tcp", interfaces=["lo"])


def monolithic_tokens():
    torch.set_num_threads(1)
    model = TinyModel()
    cache = PagedCache(NUM_PAGES, KV_HEADS, PAGE_TOKENS)
    table = list(range(NUM_PAGES))
    logits = model.forward(PROMPT, 0, table, cache)
    return greedy_decode(model, logits, len(PROMPT), table, cache, STEPS), logits


def prefill_rank(conn, rank: int, tp: int, chunk) -> None:
    try:
        torch.set_num_threads(1)
        model = TinyModel()
        heads = kv.KvLayout("gqa", "f64", LAYERS, PAGE_TOKENS, HEAD_DIM, KV_HEADS).heads_per_rank(tp)
        cache = PagedCache(NUM_PAGES, heads, PAGE_TOKENS)
        tail = torch.zeros(VOCAB, dtype=torch.float64)
        engine = _engine()
        memory, size = kv.KvMemoryLayout.contiguous(layout(), tp, "separate", NUM_PAGES)
        assert size == cache.nbytes
        engine.register(cache.buf.data_ptr(), cache.nbytes)   # region 0: the cache
        engine.register(tail.data_ptr(), TAIL_BYTES)           # region 1: the tail source
        pre = kv.Prefiller(engine, layout(), rank, tp, memory, regions=[0, 1])
        conn.send(("address", engine.address))
        request_id, peer = conn.recv()
        # This rank's own page table (another permutation than the decoder's).
        table = random.Random(100 + rank).sample(range(NUM_PAGES), kv.pages_for_tokens(len(PROMPT), PAGE_TOKENS))
        pre.add_request(request_id, len(PROMPT), table, tail_region=1, tail_offset=0, decode_tp=1)

        def allreduce(part):
            if tp == 1:
                return part
            peer.send(part.numpy())
            other = torch.from_numpy(peer.recv())
            return part + other if rank == 0 else other + part  # the same order on both ranks

        q_per_rank = 8 // tp
        step = chunk or len(PROMPT)
        for start in range(0, len(PROMPT), step):
            end = min(len(PROMPT), start + step)
            pass_id = pre.begin_pass([(request_id, end)])
            logits = model.forward(PROMPT[start:end], start, table, cache, heads=(rank * q_per_rank, (rank + 1) * q_per_rank),
                                   allreduce=allreduce, on_layer=lambda layer: pre.layer_done(pass_id, layer))
            if end == len(PROMPT):
                tail.copy_(logits)
            pre.tail_ready(pass_id)
        finished = []
        while not finished:
            finished = pre.wait_finished(30000)
        conn.send(("done", finished[0]["ok"], finished[0]["message"], pre.stats()))
        conn.recv()
        pre.shutdown()
    except Exception:  # noqa: BLE001
        conn.send(("error", traceback.format_exc()))


def decoder(conn, prefill_addresses, prefill_tp: int) -> None:
    try:
        torch.set_num_threads(1)
        model = TinyModel()
        cache = PagedCache(NUM_PAGES, KV_HEADS, PAGE_TOKENS)
        tail = torch.zeros(VOCAB, dtype=torch.float64)
        engine = _engine()
        memory, size = kv.KvMemoryLayout.contiguous(layout(), 1, "separate", NUM_PAGES)
        engine.register(cache.buf.data_ptr(), cache.nbytes)
        engine.register(tail.data_ptr(), TAIL_BYTES)
        dec = kv.Decoder(engine, layout(), 0, 1, memory, regions=[0, 1])
        table = random.Random(5).sample(range(NUM_PAGES), NUM_PAGES)  # permuted, non-contiguous
        n = kv.pages_for_tokens(len(PROMPT), PAGE_TOKENS)
        dec.start("req-1", prefill_addresses, len(PROMPT), table[:n], tail_region=1, tail_offset=0,
                  tail_length=TAIL_BYTES, timeout_ms=60000)
        conn.send(("started", dec.poll("req-1")))
        finished = []
        while not finished:
            finished = dec.wait_finished(30000)
        if not finished[0]["ok"]:
            conn.send(("failed", finished[0]["message"]))
            return
        tokens = greedy_decode(model, tail.clone(), len(PROMPT), table, cache, STEPS)
        conn.send(("tokens", tokens, tail.clone()))
        conn.recv()
    except Exception:  # noqa: BLE001
        conn.send(("error", traceback.format_exc()))


def _expect(conn, tag):
    assert conn.poll(TIMEOUT), f"no '{tag}' in time"
    msg = conn.recv()
    assert msg[0] == tag, msg[1] if len(msg) > 1 else msg
    return msg


def test_the_comparison_can_fail():
    """The reference decodes varied tokens, and misplaced heads or a lost prompt change them: so
    token equality below really checks the transferred KV."""
    want, logits = monolithic_tokens()
    assert len(set(want)) >= 6, want
    model, table = TinyModel(), list(range(NUM_PAGES))
    empty = PagedCache(NUM_PAGES, KV_HEADS, PAGE_TOKENS)
    assert greedy_decode(model, logits, len(PROMPT), table, empty, STEPS) != want
    swapped = PagedCache(NUM_PAGES, KV_HEADS, PAGE_TOKENS)
    model.forward(PROMPT, 0, table, swapped)
    swapped.buf[:, :, :, [0, 1, 2, 3]] = swapped.buf[:, :, :, [2, 3, 0, 1]].clone()
    assert greedy_decode(model, logits, len(PROMPT), table, swapped, STEPS) != want


@pytest.mark.parametrize("prefill_tp,chunk", [(1, None), (1, 5), (2, None)], ids=["tp1", "tp1-chunked", "tp2-to-tp1"])
def test_decoded_tokens_equal_the_monolithic_run(prefill_tp, chunk):
    want, want_logits = monolithic_tokens()
    ctx = mp.get_context("spawn")
    links = [ctx.Pipe() for _ in range(prefill_tp)]
    peer_a, peer_b = ctx.Pipe()  # the TP ranks' all-reduce
    peers = [peer_a, peer_b]
    procs = [ctx.Process(target=prefill_rank, args=(links[r][1], r, prefill_tp, chunk)) for r in range(prefill_tp)]
    for p in procs:
        p.start()
    try:
        addresses = [_expect(links[r][0], "address")[1] for r in range(prefill_tp)]
        dec_parent, dec_child = ctx.Pipe()
        dproc = ctx.Process(target=decoder, args=(dec_child, addresses, prefill_tp))
        dproc.start()
        procs.append(dproc)
        _expect(dec_parent, "started")
        for r in range(prefill_tp):  # the framework routes the request to the prefill instance
            links[r][0].send(("req-1", peers[r] if prefill_tp > 1 else None))
        for r in range(prefill_tp):
            _, ok, message, stats = _expect(links[r][0], "done")
            assert ok, message
            assert stats["pages_posted"] == LAYERS * 2 * 6, stats  # each rank: its heads' K and V, 6 pages
        _, tokens, logits = _expect(dec_parent, "tokens")
        assert torch.allclose(logits, want_logits, rtol=1e-9, atol=1e-12)
        if prefill_tp == 1 and chunk is None:
            # Same shapes, same order of operations: bit for bit. (A chunked prefill multiplies other
            # shapes, so its last bits may differ with the BLAS; its tokens may not.)
            assert torch.equal(logits, want_logits), "one prefill rank computes exactly the monolithic logits"
        assert tokens == want, f"decoded {tokens}, monolithic {want}"
        dec_parent.send("bye")
        for r in range(prefill_tp):
            links[r][0].send("bye")
    finally:
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()

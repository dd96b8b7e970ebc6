"""python -m fabric_lib.kv.bench: how much KV transfer a prefill exposes.

A prefill rank computes a prompt in chunks, layer by layer; after each layer its pages go to a
decode rank (another process) through fabric_lib.kv, triggered from the model's stream by the
prefiller's UVM word (GPU) or by layer_done() (CPU). Measured per prompt length: the prefill time
(first chunk starts -> last layer done) and the **exposed transfer time** (last layer done ->
the decoder is notified that every page and the tail arrived), as a fraction of the prefill.

Default shape (GPU): a Qwen3-235B-like TP4 rank pair: 94 layers, 1 KV head per rank, head dim
128, bf16, 32 KiB pages (128 tokens), chunked prefill of 16K tokens, and per-layer compute of the
rank's real dimensions (hidden 4096, 16 query heads, the MoE's active-expert FLOPs as a dense MLP
of 8 x 1536 / 4 = 3072): attention over the chunk (causal) and over the earlier chunks, q/k/v/o
projections and the MLP. Targets: exposed <= 1% of prefill at >= 16K tokens, <= 3% at 4K.

  GPU (the lead's machine):  python -m fabric_lib.kv.bench --device cuda --provider nvlink
  CPU smoke run:             python -m fabric_lib.kv.bench --device cpu --provider tcp --small
Prints a table and MET/MISSED per prompt (GPU), writes --csv, and --plot (matplotlib).
"""

from __future__ import annotations

import argparse
import csv
import math
import multiprocessing as mp
import statistics
import sys
import time
import traceback

import fabric_lib.kv as kv

QWEN3_VOCAB = 151936


def _parse(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--provider", default="nvlink")
    p.add_argument("--decode-gpu", type=int, default=None, help="GPU of the decoder (default: 1 if there are two, else 0)")
    p.add_argument("--prompts", default="4096,16384,32768,131072")
    p.add_argument("--chunk", type=int, default=16384)
    p.add_argument("--layers", type=int, default=94)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--q-heads", type=int, default=16, help="query heads per rank")
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--mlp", type=int, default=3072, help="dense MLP width standing for the rank's active experts")
    p.add_argument("--page-tokens", type=int, default=128)
    p.add_argument("--tail-bytes", type=int, default=QWEN3_VOCAB * 2, help="the tail (last logits, bf16)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--small", action="store_true", help="a tiny shape for a CPU smoke run")
    p.add_argument("--csv", default="")
    p.add_argument("--plot", default="")
    a = p.parse_args(argv)
    if a.small:
        a.prompts, a.chunk, a.layers, a.hidden, a.q_heads, a.head_dim, a.mlp, a.page_tokens, a.runs = (
            "256,1024", 512, 4, 128, 2, 32, 256, 16, 2)
    return a


def _layout(a):
    # Qwen3-235B: 4 KV heads; at TP4 one per rank.
    return kv.KvLayout("gqa", "bf16", a.layers, a.page_tokens, a.head_dim, 4)


class _Word:
    def __init__(self, ptr):
        self.__cuda_array_interface__ = {"shape": (1,), "typestr": "<i8", "data": (ptr, False), "version": 3}


def _attention(torch, q, k, v, causal):
    F = torch.nn.functional
    k, v = k.to(q.dtype), v.to(q.dtype)
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])  # torch < 2.0 (the CPU smoke run)
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return s.softmax(-1) @ v


class _Layer:
    """One transformer layer of the rank's dimensions (weights shared by every layer)."""

    def __init__(self, torch, a, device):
        g = torch.Generator().manual_seed(0)
        dt = torch.bfloat16 if device == "cuda" else torch.float32

        def w(r, c):
            return (torch.randn(r, c, generator=g) / math.sqrt(r)).to(device=device, dtype=dt)

        self.torch, self.a = torch, a
        self.wqkv = w(a.hidden, (a.q_heads + 2) * a.head_dim)
        self.wo = w(a.q_heads * a.head_dim, a.hidden)
        self.wg, self.wu, self.wd = w(a.hidden, a.mlp), w(a.hidden, a.mlp), w(a.mlp, a.hidden)
        self.dtype = dt

    def __call__(self, x, k_flat, v_flat, start):
        torch, a = self.torch, self.a
        F = torch.nn.functional
        t = x.shape[0]
        h = F.rms_norm(x, (a.hidden,)) if hasattr(F, "rms_norm") else x
        qkv = h @ self.wqkv
        q = qkv[:, : a.q_heads * a.head_dim].view(t, a.q_heads, a.head_dim).transpose(0, 1)[None]
        k = qkv[:, a.q_heads * a.head_dim: (a.q_heads + 1) * a.head_dim]
        v = qkv[:, (a.q_heads + 1) * a.head_dim:]
        k_flat[start:start + t] = k  # the paged cache: 1 head per rank, consecutive pages = [tokens, dim]
        v_flat[start:start + t] = v
        kk = k_flat[start:start + t].view(1, 1, t, a.head_dim).expand(1, a.q_heads, t, a.head_dim)
        vv = v_flat[start:start + t].view(1, 1, t, a.head_dim).expand(1, a.q_heads, t, a.head_dim)
        out = _attention(torch, q, kk, vv, True)
        if start > 0:  # the earlier chunks (their share of the FLOPs and memory traffic)
            kp = k_flat[:start].view(1, 1, start, a.head_dim).expand(1, a.q_heads, start, a.head_dim)
            vp = v_flat[:start].view(1, 1, start, a.head_dim).expand(1, a.q_heads, start, a.head_dim)
            out = out + _attention(torch, q, kp, vp, False)
        x = x + out[0].transpose(0, 1).reshape(t, a.q_heads * a.head_dim) @ self.wo
        h = F.rms_norm(x, (a.hidden,)) if hasattr(F, "rms_norm") else x
        return x + (F.silu(h @ self.wg) * (h @ self.wu)) @ self.wd


def _decoder(conn, a, pages, gpu):
    try:
        import torch
        if a.device == "cuda":
            torch.cuda.set_device(gpu)
        dev = a.device
        layout = _layout(a)
        memory, nbytes = kv.KvMemoryLayout.contiguous(layout, 4, "separate", pages)
        cache = torch.zeros(nbytes, dtype=torch.uint8, device=dev)
        tail = torch.zeros(a.tail_bytes, dtype=torch.uint8, device=dev)
        engine = kv.Engine(provider=a.provider, interfaces=["lo"] if a.provider == "tcp" else [])
        engine.register(cache.data_ptr(), nbytes, cuda=dev == "cuda")
        engine.register(tail.data_ptr(), a.tail_bytes, cuda=dev == "cuda")
        dec = kv.Decoder(engine, layout, 0, 4, memory, regions=[0, 1], peer_timeout_ms=10000, heartbeat_ms=500)
        conn.send(("ready", engine.address))
        while True:
            msg = conn.recv()
            if msg == "bye":
                break
            request_id, tokens, prefill_address = msg
            n = kv.pages_for_tokens(tokens, a.page_tokens)
            dec.start(request_id, [prefill_address] * 4, tokens, list(range(n)), tail_region=1, tail_length=a.tail_bytes,
                      timeout_ms=600000)
            conn.send(("started",))
            finished = []
            while not finished:
                finished = dec.wait_finished(60000)
            notified = time.monotonic()
            conn.send(("finished", finished[0]["ok"], finished[0]["message"], notified))
        dec.shutdown()
    except Exception:  # noqa: BLE001
        conn.send(("error", traceback.format_exc()))


def main(argv=None) -> int:
    a = _parse(sys.argv[1:] if argv is None else argv)
    import torch
    prompts = [int(x) for x in a.prompts.split(",")]
    dev = a.device
    if dev == "cuda":
        torch.cuda.set_device(0)
    decode_gpu = a.decode_gpu if a.decode_gpu is not None else (1 if dev == "cuda" and torch.cuda.device_count() > 1 else 0)
    layout = _layout(a)
    pages = kv.pages_for_tokens(max(prompts), a.page_tokens)
    # Prefill rank 0 of TP4 -> decode rank 0 of TP4 (the other rank pairs run the same in parallel).
    memory, nbytes = kv.KvMemoryLayout.contiguous(layout, 4, "separate", pages)
    dt = torch.bfloat16 if dev == "cuda" else torch.float32
    cache = torch.zeros(nbytes // 2, dtype=torch.bfloat16, device=dev)
    tail = torch.zeros(a.tail_bytes, dtype=torch.uint8, device=dev)
    engine = kv.Engine(provider=a.provider, interfaces=["lo"] if a.provider == "tcp" else [])
    engine.register(cache.data_ptr(), nbytes, cuda=dev == "cuda")
    engine.register(tail.data_ptr(), a.tail_bytes, cuda=dev == "cuda")
    # One prefill engine stands for the 4 ranks' addresses: the decoder's rank 0 reads rank 0 only.
    pre = kv.Prefiller(engine, layout, 0, 4, memory, regions=[0, 1], peer_timeout_ms=10000, heartbeat_ms=500)
    watcher = word = base = None
    if dev == "cuda":
        watcher = pre.attach_progress_watcher()
        word = torch.as_tensor(_Word(watcher.device_ptr), device="cuda")
        base = torch.zeros(1, dtype=torch.int64, device="cuda")
    layer = _Layer(torch, a, dev)
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_decoder, args=(child, a, pages, decode_gpu))
    proc.start()
    msg = parent.recv()
    if msg[0] != "ready":
        print(msg[1], file=sys.stderr)
        return 1
    page_elems = memory.page_stride // 2
    rows, counter = [], 0
    try:
        for tokens in prompts:
            fractions, prefill_ms, exposed_ms = [], [], []
            for run in range(a.runs + 1):  # run 0 warms up
                counter += 1
                request_id = f"b{counter}"
                n = kv.pages_for_tokens(tokens, a.page_tokens)
                parent.send((request_id, tokens, pre.address))
                assert parent.recv()[0] == "started"
                pre.add_request(request_id, tokens, list(range(n)), tail_region=1, decode_tp=4, timeout_ms=600000)
                waited = time.monotonic()
                while pre.poll(request_id) == "bootstrapping":  # the dispatch is on its way
                    if parent.poll(0):
                        raise RuntimeError(f"decoder: {parent.recv()}")
                    if time.monotonic() - waited > 60:
                        raise RuntimeError(f"no dispatch for {request_id}: {pre.status(request_id)}")
                    time.sleep(0.001)
                x_all = torch.randn(min(tokens, a.chunk), a.hidden, device=dev, dtype=dt)
                if dev == "cuda":
                    torch.cuda.synchronize()
                t0 = time.monotonic()
                last_done = None
                for start in range(0, tokens, a.chunk):
                    end = min(tokens, start + a.chunk)
                    pass_id = pre.begin_pass([(request_id, end)])
                    if dev == "cuda":
                        base.fill_(kv.Prefiller.progress_word_value(pass_id, 0))
                    x = x_all[: end - start]
                    for l in range(a.layers):
                        k_flat = cache[memory.k[l][1] // 2: memory.k[l][1] // 2 + n * page_elems].view(-1, a.head_dim)
                        v_flat = cache[memory.v[l][1] // 2: memory.v[l][1] // 2 + n * page_elems].view(-1, a.head_dim)
                        x = layer(x, k_flat, v_flat, start)
                        if dev == "cuda":
                            word.copy_(base + (l + 1))
                        else:
                            pre.layer_done(pass_id, l)
                    if end == tokens:
                        if dev == "cuda":
                            last_done = torch.cuda.Event()
                            last_done.record()
                            word.copy_(base + (a.layers + 1))  # the tail (logits) is in place
                        else:
                            last_done = time.monotonic()
                            pre.tail_ready(pass_id)
                if dev == "cuda":
                    last_done.synchronize()
                    t_last = time.monotonic()
                else:
                    t_last = last_done
                _, ok, message, notified = parent.recv()
                assert ok, message
                done = []
                while not done:  # the prefiller's side ended too (its source pages are free)
                    done = pre.wait_finished(100)
                if run == 0:
                    continue
                prefill_ms.append((t_last - t0) * 1e3)
                exposed_ms.append(max(0.0, notified - t_last) * 1e3)
                fractions.append(exposed_ms[-1] / prefill_ms[-1])
            frac = statistics.median(fractions)
            target = (0.01 if tokens >= 16384 else 0.03) if dev == "cuda" else None
            verdict = "" if target is None else ("MET" if frac <= target else "MISSED")
            rows.append({"prompt_tokens": tokens, "chunk": a.chunk, "layers": a.layers, "device": dev, "provider": a.provider,
                         "prefill_ms": round(statistics.median(prefill_ms), 3), "exposed_ms": round(statistics.median(exposed_ms), 3),
                         "exposed_fraction": round(frac, 5), "target": "" if target is None else f"<={target:.0%}",
                         "verdict": verdict})
            r = rows[-1]
            print(f"prompt {tokens:>7} tokens: prefill {r['prefill_ms']:9.2f} ms, exposed transfer {r['exposed_ms']:8.3f} ms = "
                  f"{100 * frac:6.2f}% {('target ' + r['target'] + ': ' + verdict) if verdict else ''}", flush=True)
    finally:
        parent.send("bye")
        proc.join(60)
        if watcher is not None:
            watcher.close()
        pre.shutdown()
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            wr = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
            wr.writeheader()
            wr.writerows(rows)
    if a.plot:
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
            fig, ax = plt.subplots(figsize=(6, 4))
            ax.plot([r["prompt_tokens"] for r in rows], [100 * r["exposed_fraction"] for r in rows], "o-")
            ax.set_xscale("log", base=2)
            ax.set_xlabel("prompt tokens")
            ax.set_ylabel("exposed transfer, % of prefill")
            ax.set_title(f"fabric_lib.kv: {a.layers} layers, chunk {a.chunk}, {dev}/{a.provider}")
            ax.grid(alpha=0.3)
            fig.tight_layout()
            fig.savefig(a.plot, dpi=110)
        except ImportError:
            print("(no matplotlib: no plot)", file=sys.stderr)
    return 0 if all(r["verdict"] != "MISSED" for r in rows) else 3


if __name__ == "__main__":
    sys.exit(main())

"""Identical logits end to end: a model's weights go from trainer processes (FSDP dim-0 shards,
each trainer holding only its own) through fabric_lib.weights into inference processes' models,
and the inference models' logits on a fixed input are compared, bit for bit, with the trainer
side's full model (bf16 instance) and with a quantize-dequantize reference of the same weights
(fp8 instance), after every one of several optimizer-like steps.

Processes (multiprocessing "spawn"): this one (the driver: the Controller on a thread and the
reference model), `trainers` trainer processes and one inference process per entry of
`instances` (e.g. ("bf16", "fp8"): two instances of the model, each on one rank, one with bf16
destinations and one with fp8 e4m3 + 128x128 block scales for its linear weights). The inference
side lays the weights out as vLLM does (destinations.py: fused qkv and gate_up, stacked experts)
and its model runs on the destination memory itself (bf16 parameters are views into it).

Per step v: every trainer applies a momentum-SGD update with a seeded pseudo-gradient to its own
shards, send(v)s, and returns its shards; the driver concatenates them (the trainer-side full
model, what full_tensor() would give), computes the reference logits, and checks, for each
instance: every destination byte and scale equals the reference (round-to-nearest-even bf16, the
app's CPU fp8 quantization), and the logits equal the reference's bit for bit. Also checked: the
weights and the reference logits change from step to step, the logits before the first transfer
differ from the reference, and a single corrupted destination byte changes the logits (a negative
control: the comparison can fail). Every wait is bounded; children that do not answer in time are
killed.

Device "cpu": host memory, provider "tcp" or "shm". Device "cuda": shards and destinations in
GPU memory (trainers on GPU 0; inference ranks and the reference on GPU 1 when there are two),
provider "ipc" (the same-host IPC backend), prepare (cast, fp8 quantization) on the GPU.
"""
from __future__ import annotations

import dataclasses
import multiprocessing as mp
import threading
import time
import traceback
from typing import Dict, List, Tuple

import numpy as np
import torch

import destinations as dst
from fabric_lib import weights


@dataclasses.dataclass
class Config:
    model: str = "builtin"            # "builtin" (tiny_moe) or "hf-qwen3-moe" (transformers)
    device: str = "cpu"               # "cpu" or "cuda"
    provider: str = "tcp"
    domains: int = 1
    trainers: int = 2
    master_dtype: str = "f32"         # the trainers' shards: "f32" (cast on send) or "bf16" (direct writes)
    instances: Tuple[str, ...] = ("bf16", "fp8")
    steps: int = 3
    seed: int = 1
    lr: float = 0.02
    batch: int = 2
    seq: int = 24
    timeout_s: float = 120.0          # any one wait for a process
    step_timeout_s: float = 30.0
    corrupt_after_step: int = 0       # >0: the inference ranks corrupt one byte after that step (the test must fail)


def make_spec(model: str):
    if model == "builtin":
        import tiny_moe
        return tiny_moe.Spec()
    if model == "hf-qwen3-moe":
        import hf_qwen3_moe
        return hf_qwen3_moe.Spec()
    raise ValueError(f"unknown model {model!r}")


def _interfaces(cfg: Config) -> List[str]:
    return ["lo"] if cfg.provider == "tcp" else []


def _device(cfg: Config, role: str) -> str:
    torch.set_num_threads(1)  # the same kernels in every process (and frugal on small machines)
    if cfg.device != "cuda":
        return "cpu"
    gpu = 1 if role == "inference" and torch.cuda.device_count() > 1 else 0
    torch.cuda.set_device(gpu)
    return f"cuda:{gpu}"


def _tokens(cfg: Config, vocab: int) -> torch.Tensor:
    return torch.randint(0, vocab, (cfg.batch, cfg.seq), generator=torch.Generator().manual_seed(cfg.seed + 7))


def _bits(t: torch.Tensor) -> np.ndarray:
    return dst.bf16_bits(t)


def _from_bits(a: np.ndarray, dtype: str) -> torch.Tensor:
    if dtype == "bf16":
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(a.view(np.float32).copy())


# --- trainer process ------------------------------------------------------------------------------

def _trainer(conn, cfg: Config, rank: int, controller: str) -> None:
    try:
        dev = _device(cfg, "trainer")
        spec = make_spec(cfg.model)
        shapes = spec.shapes()
        full = spec.init_weights(cfg.seed)
        mdt = torch.float32 if cfg.master_dtype == "f32" else torch.bfloat16
        ep = weights.TrainerEndpoint(rank, cfg.trainers, controller, provider=cfg.provider, domains=cfg.domains,
                                     interfaces=_interfaces(cfg), step_timeout_s=cfg.step_timeout_s)
        shards: Dict[str, Tuple[tuple, torch.Tensor]] = {}
        for name, shape in shapes.items():
            box = weights.trainer_box(name, list(shape), fsdp_size=cfg.trainers, fsdp_rank=rank)
            if box is None:
                continue
            rows, cols = dst.view2d(shape)
            local = full[name].reshape(rows, cols)[box[0]:box[1]].to(mdt).contiguous().to(dev)
            shards[name] = (tuple(box), local)
            ep.add_shard(name, local, shape, box)
        del full  # from here on this rank holds only its shards
        ep.connect()

        def report():
            if dev != "cpu":
                torch.cuda.synchronize()
            return {n: (box, _bits(t), cfg.master_dtype) for n, (box, t) in shards.items()}

        conn.send(("connected", ep.fingerprint, report()))
        momentum = {n: torch.zeros(t.shape, dtype=torch.float32, device=dev) for n, (_, t) in shards.items()}
        while True:
            msg = conn.recv()
            if msg[0] == "bye":
                break
            step = msg[1]
            for i, name in enumerate(sorted(shards)):  # the optimizer step, on this rank's rows only
                t = shards[name][1]
                g = torch.Generator().manual_seed(((cfg.seed * 1000 + step) * 1000 + rank) * 100000 + i)
                grad = torch.randn(t.shape, generator=g).to(dev)
                momentum[name].mul_(0.9).add_(grad)
                t.sub_((cfg.lr * momentum[name]).to(t.dtype))
            if dev != "cpu":
                torch.cuda.synchronize()  # the update is in memory before the transfer reads it
            stats = ep.send(step)
            conn.send(("sent", step, stats, report()))
    except Exception:  # noqa: BLE001 - reported to the driver
        conn.send(("error", f"trainer {rank}:\n{traceback.format_exc()}"))


# --- inference process ----------------------------------------------------------------------------

def _flip_one_byte(dests, buffers) -> str:
    """Flips the sign bit of the first non-zero element of the first fp8 destination (or of
    lm_head / the last destination when there is none). Returns what it flipped."""
    d = next((d for d in dests if d.fp8), None) or next((d for d in dests if d.name == "lm_head.weight"), dests[-1])
    if d.fp8:
        flat = buffers[d.name][0].view(-1)
        i = int(torch.nonzero(flat)[0])
        flat[i] ^= 0x80
    else:
        flat = buffers[d.name].view(-1).view(torch.int16)
        i = int(torch.nonzero(flat)[0])
        flat[i] = flat[i] ^ -0x8000
    return f"{d.name}[{i}]"


def _inference(conn, cfg: Config, rank: int, controller: str) -> None:
    try:
        dev = _device(cfg, "inference")
        spec = make_spec(cfg.model)
        shapes = spec.shapes()
        dests = dst.plan(shapes, cfg.instances[rank] == "fp8")
        ep = weights.InferenceEndpoint(rank, len(cfg.instances), controller, provider=cfg.provider, domains=cfg.domains,
                                       interfaces=_interfaces(cfg))
        buffers = {}
        for d in dests:
            if d.fp8:  # fp8 e4m3 bytes (uint8: torch 1.13 has no float8 dtype) and f32 block scales
                q = torch.zeros(d.rows, d.cols, dtype=torch.uint8, device=dev)
                s = torch.zeros(d.scale_shape(), dtype=torch.float32, device=dev)
                ep.add_tensor(d.name, q, d.layout(), dtype="fp8_e4m3", scales=s)
                buffers[d.name] = (q, s)
            else:
                b = torch.zeros(d.rows, d.cols, dtype=torch.bfloat16, device=dev)
                ep.add_tensor(d.name, b, d.layout())
                buffers[d.name] = b
        ep.connect()
        conn.send(("connected", ep.fingerprint))
        runner = spec.runner(dev)
        tokens = _tokens(cfg, spec.vocab)

        def logits():
            runner.load(dst.model_weights(dests, buffers, shapes))
            return runner.logits(tokens).cpu().numpy()

        def contents():
            return {n: (_bits(b[0]), _bits(b[1])) if isinstance(b, tuple) else _bits(b) for n, b in buffers.items()}

        while True:
            msg = conn.recv()
            if msg[0] == "bye":
                break
            if msg[0] == "logits":
                conn.send(("logits", logits()))
            elif msg[0] == "wait":
                step = msg[1]
                t0 = time.monotonic()
                ep.wait_for_version(step, timeout_s=cfg.step_timeout_s)
                waited = time.monotonic() - t0
                if cfg.corrupt_after_step == step:
                    _flip_one_byte(dests, buffers)
                conn.send(("version", step, waited, logits(), contents()))
            elif msg[0] == "flip":  # negative control: one flipped byte, the logits, then restored
                what = _flip_one_byte(dests, buffers)
                corrupted = logits()
                _flip_one_byte(dests, buffers)
                conn.send(("flipped", what, corrupted, logits()))
    except Exception:  # noqa: BLE001 - reported to the driver
        conn.send(("error", f"inference {rank}:\n{traceback.format_exc()}"))


# --- driver ---------------------------------------------------------------------------------------

def _recv(conn, tag: str, who: str, timeout_s: float):
    if not conn.poll(timeout_s):
        raise TimeoutError(f"{who}: no '{tag}' within {timeout_s:.0f} s")
    msg = conn.recv()
    if msg[0] == "error":
        raise RuntimeError(msg[1])
    assert msg[0] == tag, f"{who}: expected '{tag}', got {msg[0]!r}"
    return msg


def _gather(shapes, reports) -> Dict[str, torch.Tensor]:
    """The full parameters from every trainer's shards (FSDP full_tensor(), in the driver)."""
    parts: Dict[str, list] = {}
    for rep in reports:
        for name, (box, bits, dtype) in rep.items():
            parts.setdefault(name, []).append((box, _from_bits(bits, dtype)))
    full = {}
    for name, shape in shapes.items():
        rows, cols = dst.view2d(shape)
        pieces = sorted(parts[name], key=lambda p: p[0][0])
        assert pieces[0][0][0] == 0 and pieces[-1][0][1] == rows, f"{name}: the trainers' boxes do not cover it"
        full[name] = torch.cat([t for _, t in pieces], dim=0).reshape(shape)
    return full


def _equal_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.array_equal(np.ascontiguousarray(a).view(np.uint8), np.ascontiguousarray(b).view(np.uint8))


def _describe_difference(name: str, got: np.ndarray, want: np.ndarray) -> str:
    if got.shape != want.shape:
        return f"{name}: shape {got.shape} != {want.shape}"
    bad = np.flatnonzero(got.reshape(-1) != want.reshape(-1))
    return f"{name}: {bad.size} of {got.size} elements differ (first at flat index {bad[0]}: {got.reshape(-1)[bad[0]]} != {want.reshape(-1)[bad[0]]})"


class _Reference:
    """The driver's model and the expected destination contents of each instance."""

    def __init__(self, cfg: Config, spec, device: str) -> None:
        self.cfg, self.spec, self.device = cfg, spec, device
        self.shapes = spec.shapes()
        self.runner = spec.runner(device)
        self.tokens = _tokens(cfg, spec.vocab)
        self.dests = {kind: dst.plan(self.shapes, kind == "fp8") for kind in set(cfg.instances)}

    def logits(self, kind: str, full: Dict[str, torch.Tensor]):
        """(logits, expected contents) of an instance for the full weights `full`."""
        expect = {d.name: dst.expected(d, full) for d in self.dests[kind]}
        if kind == "bf16":  # the trainer side's model: each parameter its own tensor, cast to bf16
            w = {n: full[n].float().to(torch.bfloat16).to(self.device) for n in self.shapes}
        else:  # the quantize-dequantize reference (fp8 destinations), bf16 for the others
            on_dev = {n: tuple(x.to(self.device) for x in e) if isinstance(e, tuple) else e.to(self.device) for n, e in expect.items()}
            w = dst.model_weights(self.dests[kind], on_dev, self.shapes)
        self.runner.load(w)
        out = self.runner.logits(self.tokens).cpu().numpy()
        bits = {n: (_bits(e[0]), _bits(e[1])) if isinstance(e, tuple) else _bits(e) for n, e in expect.items()}
        return out, bits


def _check_contents(kind: str, rank: int, step: int, got: dict, want: dict) -> int:
    problems = []
    for name, w in want.items():
        g = got[name]
        pairs = [(name, g, w)] if not isinstance(w, tuple) else [(name + " (fp8 bytes)", g[0], w[0]), (name + " (scales)", g[1], w[1])]
        for label, a, b in pairs:
            if not _equal_bits(a, b):
                problems.append(_describe_difference(label, a, b))
    assert not problems, f"step {step}, {kind} instance (inference rank {rank}): destination bytes differ from the reference:\n  " + "\n  ".join(problems)
    return len(want)


def run(cfg: Config, log=print) -> dict:
    """Runs the end-to-end check; raises AssertionError (or the failing process's error) on any
    difference. Returns figures for the log."""
    spec = make_spec(cfg.model)
    shapes = spec.shapes()
    ref = _Reference(cfg, spec, _device(cfg, "inference"))
    ctx = mp.get_context("spawn")
    ctl = weights.Controller(trainers=cfg.trainers, inference=len(cfg.instances), provider=cfg.provider, domains=cfg.domains,
                             interfaces=_interfaces(cfg), setup_timeout_s=cfg.timeout_s)
    outcome: dict = {}

    def controller():
        try:
            outcome["schedule"] = ctl.run()
        except Exception as e:  # noqa: BLE001 - re-raised in the driver
            outcome["error"] = e

    thread = threading.Thread(target=controller, daemon=True)
    thread.start()
    procs, trainers, inference = [], [], []
    report = {"model": spec.name, "parameters": len(shapes), "steps": []}
    try:
        for role, count, target, conns in (("trainer", cfg.trainers, _trainer, trainers), ("inference", len(cfg.instances), _inference, inference)):
            for r in range(count):
                parent, child = ctx.Pipe()
                p = ctx.Process(target=target, args=(child, cfg, r, ctl.address), name=f"weights-e2e-{role}-{r}", daemon=True)
                p.start()
                procs.append(p)
                conns.append(parent)
        hello_t = [_recv(c, "connected", f"trainer {r}", cfg.timeout_s) for r, c in enumerate(trainers)]
        hello_i = [_recv(c, "connected", f"inference {r}", cfg.timeout_s) for r, c in enumerate(inference)]
        thread.join(cfg.timeout_s)
        assert not thread.is_alive(), "the controller did not finish planning"
        if "error" in outcome:
            raise outcome["error"]
        fp = outcome["schedule"]["fingerprint"]
        assert all(h[1] == fp for h in hello_t + hello_i), "every rank got the same schedule"
        report["schedule"] = {k: outcome["schedule"][k] for k in ("fingerprint", "tasks", "staged_units")}
        dests = {kind: ref.dests[kind] for kind in ref.dests}
        log(f"[e2e] {spec.name} on {cfg.device}/{cfg.provider}: {len(shapes)} parameters, {cfg.trainers} trainers ({cfg.master_dtype} "
            f"shards) -> {len(cfg.instances)} inference ranks {list(cfg.instances)} "
            f"({', '.join(f'{k}: {len(v)} tensors, {sum(d.fp8 for d in v)} fp8' for k, v in dests.items())}); schedule "
            f"{report['schedule']['tasks']} tasks, {report['schedule']['staged_units']} staged fp8 blocks")

        full = _gather(shapes, [h[2] for h in hello_t])
        prev_logits = {}
        for r, c in enumerate(inference):  # before any transfer: the comparison is not vacuous
            c.send(("logits",))
            got = _recv(c, "logits", f"inference {r}", cfg.timeout_s)[1]
            want, _ = ref.logits(cfg.instances[r], full)
            assert not _equal_bits(got, want), "logits before the first transfer equal the reference"
            prev_logits[r] = want
        for step in range(1, cfg.steps + 1):
            t0 = time.monotonic()
            for c in inference:
                c.send(("wait", step))
            for c in trainers:
                c.send(("step", step))
            sent = [_recv(c, "sent", f"trainer {r}", cfg.timeout_s) for r, c in enumerate(trainers)]
            versions = [_recv(c, "version", f"inference {r}", cfg.timeout_s) for r, c in enumerate(inference)]
            wall = time.monotonic() - t0
            new_full = _gather(shapes, [s[3] for s in sent])
            unchanged = [n for n in shapes if torch.equal(new_full[n], full[n])]
            assert not unchanged, f"step {step}: the update left {unchanged[:3]} unchanged"
            full = new_full
            line = []
            for r, v in enumerate(versions):
                kind = cfg.instances[r]
                want_logits, want_contents = ref.logits(kind, full)
                n = _check_contents(kind, r, step, v[4], want_contents)
                assert not _equal_bits(want_logits, prev_logits[r]), f"step {step}: the reference logits did not change"
                if not _equal_bits(v[3], want_logits):
                    raise AssertionError(f"step {step}, {kind} instance (inference rank {r}): logits differ from the reference: "
                                         + _describe_difference("logits", v[3], want_logits) + f", max |diff| {np.abs(v[3] - want_logits).max()}")
                prev_logits[r] = want_logits
                line.append(f"{kind}: {n} destinations byte-exact, logits bit-identical")
            stats = [s[2] for s in sent]
            report["steps"].append({"step": step, "wall_s": wall, "trainer_s": [s["total_s"] for s in stats],
                                    "bytes": sum(s["bytes_written"] for s in stats), "wrs": sum(s["wrs"] for s in stats)})
            log(f"[e2e] step {step}: {report['steps'][-1]['bytes'] / 1e6:.2f} MB in {report['steps'][-1]['wrs']} WRs, "
                f"send {max(report['steps'][-1]['trainer_s']) * 1e3:.1f} ms; " + "; ".join(line))
        for r, c in enumerate(inference):  # negative control: one corrupted byte is seen in the logits
            c.send(("flip",))
            _, what, corrupted, restored = _recv(c, "flipped", f"inference {r}", cfg.timeout_s)
            assert not _equal_bits(corrupted, prev_logits[r]), f"flipping {what} did not change the logits"
            assert _equal_bits(restored, prev_logits[r]), f"restoring {what} did not restore the logits"
            log(f"[e2e] negative control, {cfg.instances[r]} instance: flipping one byte ({what}) changes the logits")
        return report
    finally:
        for c in trainers + inference:
            try:
                c.send(("bye",))
            except (OSError, ValueError):
                pass
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
                p.join(10)
        thread.join(5)

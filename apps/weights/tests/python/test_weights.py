"""fabric_lib.weights from Python: the docs' example, bf16 fused destinations over shm, and a
metadata error that reaches every rank. All ranks run as threads of this process, each with its
own engine."""
import os
import re
import threading

import numpy as np
import pytest

from fabric_lib import weights


def run_all(*targets):
    """Runs the callables in threads; re-raises the first exception."""
    errors = []

    def wrap(f):
        try:
            f()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=wrap, args=(f,)) for f in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
        assert not t.is_alive(), "a rank did not finish"
    if errors:
        raise errors[0]


def test_docs_example_runs():
    doc = os.path.join(os.environ.get("FABRIC_LIB_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "../../../..")),
                       "docs", "weights.md")
    blocks = re.findall(r"```python\n(.*?)```", open(doc).read(), re.S)
    assert blocks, "docs/weights.md has no python example"
    exec(compile(blocks[0], "docs/weights.md", "exec"), {})


def bf16(x):
    """float32 array -> uint16 array of its bf16 (round to nearest even) bits."""
    b = x.astype(np.float32).view(np.uint32)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def test_bf16_gate_up_over_shm_two_domains():
    shapes = {"mlp.gate.weight": (384, 64), "mlp.up.weight": (384, 64)}
    rng = np.random.default_rng(1)
    full = {n: bf16(rng.standard_normal(s, dtype=np.float32)) for n, s in shapes.items()}
    ctl = weights.Controller(trainers=3, inference=2, provider="shm", domains=2)
    out = {}

    def trainer(rank):
        t = weights.TrainerEndpoint(rank, 3, ctl.address, provider="shm", domains=2)
        for n, s in shapes.items():
            box = weights.trainer_box(n, s, fsdp_size=3, fsdp_rank=rank)
            t.add_shard(n, np.ascontiguousarray(full[n][box[0]:box[1]]), s, box, dtype="bf16")
        t.connect()
        t.send(7)

    def inference(rank):
        i = weights.InferenceEndpoint(rank, 2, ctl.address, provider="shm", domains=2)
        layout = weights.stacked("mlp.gate_up.weight", [(n, shapes[n]) for n in shapes], split="rows", tp=2, tp_rank=rank)
        dst = np.zeros((layout[0], layout[1]), np.uint16)
        i.add_tensor("mlp.gate_up.weight", dst, layout, dtype="bf16")
        i.connect()
        i.wait_for_version(7, timeout_s=30)
        out[rank] = dst

    run_all(ctl.run, *[lambda r=r: trainer(r) for r in range(3)], *[lambda r=r: inference(r) for r in range(2)])
    for r in range(2):
        half = slice(192 * r, 192 * (r + 1))
        want = np.concatenate([full["mlp.gate.weight"][half], full["mlp.up.weight"][half]])
        assert np.array_equal(out[r], want)


def test_metadata_error_names_the_parameter_everywhere():
    ctl = weights.Controller(trainers=1, inference=1, provider="tcp", interfaces=["lo"], setup_timeout_s=20)
    seen = []

    def trainer():
        t = weights.TrainerEndpoint(0, 1, ctl.address, interfaces=["lo"])
        t.add_shard("w", np.zeros((128, 128), np.float32), (128, 128), (0, 128, 0, 128))
        with pytest.raises(ValueError, match="no trainer holds parameter 'w_renamed'"):
            t.connect()
        seen.append("trainer")

    def inference():
        i = weights.InferenceEndpoint(0, 1, ctl.address, interfaces=["lo"])
        i.add_tensor("w", np.zeros((128, 128), np.float32), (128, 128, [("w_renamed", (0, 128, 0, 128), 0, 0)]))
        with pytest.raises(ValueError, match="w_renamed"):
            i.connect()
        seen.append("inference")

    def controller():
        with pytest.raises(ValueError, match="w_renamed"):
            ctl.run()
        seen.append("controller")

    run_all(controller, trainer, inference)
    assert sorted(seen) == ["controller", "inference", "trainer"]


def test_torch_tensors_vocab_parallel_embedding_and_cast_norm():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    shapes = {"embed.weight": (1000, 64), "norm.weight": (64,)}
    full = {"embed.weight": torch.randn(1000, 64).to(torch.bfloat16), "norm.weight": torch.randn(64)}  # norm: f32
    ctl = weights.Controller(trainers=2, inference=2, provider="tcp", interfaces=["lo"])
    out = {}

    def trainer(rank):
        t = weights.TrainerEndpoint(rank, 2, ctl.address, interfaces=["lo"])
        for n, s in shapes.items():
            r0, r1, _, _ = weights.trainer_box(n, s, fsdp_size=2, fsdp_rank=rank)
            t.add_shard(n, full[n][r0:r1].clone(), s, fsdp=(2, rank))
        t.connect()
        t.send(3)

    def inference(rank):
        i = weights.InferenceEndpoint(rank, 2, ctl.address, interfaces=["lo"])
        emb = torch.zeros(500, 64, dtype=torch.bfloat16)
        norm = torch.zeros(64, dtype=torch.bfloat16)  # bf16 destination of an f32 source: cast on the trainer
        i.add_tensor("embed.weight", emb, weights.stacked("embed.weight", [("embed.weight", shapes["embed.weight"])], "rows", 2, rank))
        i.add_tensor("norm.weight", norm, weights.stacked("norm.weight", [("norm.weight", shapes["norm.weight"])]))
        i.connect()
        i.wait_for_version(3, timeout_s=30)
        out[rank] = (emb, norm)

    run_all(ctl.run, *[lambda r=r: trainer(r) for r in range(2)], *[lambda r=r: inference(r) for r in range(2)])
    for r in range(2):
        emb, norm = out[r]
        assert torch.equal(emb, full["embed.weight"][500 * r:500 * (r + 1)])
        assert torch.equal(norm, full["norm.weight"].to(torch.bfloat16))

"""Identical logits on the GPU (scripts/device-weights.sh runs this on the GPU machine): the
harness of ../e2e with the trainers' FSDP shards and the inference ranks' destinations in GPU
memory, over the same-host IPC backend (provider "ipc"), prepare (cast, fp8 quantization) on the
GPU. Trainers on GPU 0; inference ranks and the reference model on GPU 1 when there are two.

* the built-in model, f32 master shards (cast kernel and fp8 kernel from f32), 1 domain;
* a transformers Qwen3-MoE built from a config (skipped, with the reason, when transformers is
  not importable), bf16 master shards (direct writes, fp8 kernel from bf16), 2 domains;
* the fp8 dequantization table of the harness against torch.float8_e4m3fn.
Each run: 2 trainers -> 2 inference ranks (a bf16 instance and an fp8 instance), three steps."""
import pathlib
import sys

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "e2e"))

import destinations  # noqa: E402
import harness  # noqa: E402
import hf_qwen3_moe  # noqa: E402
from fabric_lib import weights  # noqa: E402

if not weights.cuda_available():
    pytest.skip("fabric_lib_weights was built without CUDA", allow_module_level=True)


def test_dequantization_table_equals_torch_float8_e4m3fn():
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip(f"torch {torch.__version__} has no float8_e4m3fn")
    theirs = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    ours = destinations.E4M3FN
    assert torch.equal(torch.isnan(theirs), torch.isnan(ours))
    finite = ~torch.isnan(ours)
    assert torch.equal(theirs[finite].view(torch.int32), ours[finite].view(torch.int32))


def test_builtin_model_gpu_ipc_identical_logits():
    report = harness.run(harness.Config(model="builtin", device="cuda", provider="ipc", master_dtype="f32", steps=3))
    assert len(report["steps"]) == 3 and report["schedule"]["staged_units"] > 0


def test_transformers_qwen3_moe_gpu_ipc_identical_logits():
    reason = hf_qwen3_moe.unavailable_reason()
    if reason:
        pytest.skip(reason)
    report = harness.run(harness.Config(model="hf-qwen3-moe", device="cuda", provider="ipc", domains=2,
                                        master_dtype="bf16", steps=3))
    assert len(report["steps"]) == 3

"""Identical logits end to end on the CPU (ctest weights.e2e): the built-in Qwen3-MoE-like model
(tiny_moe.py) from 2 trainer processes (FSDP halves in host memory) to 2 inference processes (one
instance with bf16 destinations, one with fp8 e4m3 + block scales), three optimizer-like steps,
over tcp with f32 master shards (cast on send) and over shm with bf16 shards (direct writes).
harness.py says what is checked. With `transformers` importable (not on the Debian CPU image),
the same with a transformers Qwen3-MoE.

Test of the test: FABRIC_LIB_WEIGHTS_E2E_CORRUPT=2 makes the inference ranks flip one destination
byte after step 2's transfer; the test must then fail naming the tensor and the step."""
import os
import pathlib
import sys

import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import harness  # noqa: E402
import hf_qwen3_moe  # noqa: E402

CORRUPT = int(os.environ.get("FABRIC_LIB_WEIGHTS_E2E_CORRUPT", "0"))


@pytest.mark.parametrize("provider,master", [("tcp", "f32"), ("shm", "bf16")])
def test_builtin_model_identical_logits(provider, master):
    cfg = harness.Config(model="builtin", device="cpu", provider=provider, master_dtype=master, steps=3,
                         corrupt_after_step=CORRUPT)
    report = harness.run(cfg)
    assert len(report["steps"]) == 3
    assert report["schedule"]["staged_units"] > 0  # fp8 blocks across the trainers' shard boundary were staged


def test_transformers_qwen3_moe_identical_logits_cpu():
    reason = hf_qwen3_moe.unavailable_reason()
    if reason:
        pytest.skip(reason)
    report = harness.run(harness.Config(model="hf-qwen3-moe", device="cpu", provider="tcp", steps=2,
                                        corrupt_after_step=CORRUPT))
    assert len(report["steps"]) == 2

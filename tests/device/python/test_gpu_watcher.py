"""The UVM watcher from Python on the GPU machine (scripts/device-test.sh runs this): a torch kernel
bumps an ``alloc_scalar_watcher`` word (directly and inside a CUDA graph) and the Python callback
sees the values grow to the end; and the Python callback's round-trip latency, timed on the GPU
with the same kernel as the C++ benchmark (tests/device/kernels.h, loaded with ctypes from
FABRIC_LIB_DEVICE_KERNELS). With FABRIC_LIB_BENCH_CSV set, the latency rows are appended there."""

from __future__ import annotations

import ctypes
import os
import threading
import time

import pytest

import fabric_lib as fl

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)


class _Word:
    """A one-element int64 CUDA array over a mapped word (``__cuda_array_interface__``), so torch
    kernels can write the watcher's word without any other package."""

    def __init__(self, ptr: int) -> None:
        self.__cuda_array_interface__ = {"shape": (1,), "typestr": "<i8", "data": (ptr, False), "version": 3}


def _wait(predicate, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.0005)
    return True


class _Recorder:
    def __init__(self) -> None:
        self.pairs = []
        self.lock = threading.Lock()

    def __call__(self, old: int, new: int) -> bool:
        with self.lock:
            self.pairs.append((old, new))
        return True

    def last(self) -> int:
        with self.lock:
            return self.pairs[-1][1] if self.pairs else 0

    def check_growing(self) -> None:
        with self.lock:
            prev = 0
            for old, new in self.pairs:
                assert old == prev and new > old, self.pairs
                prev = new


@pytest.fixture()
def engine():
    e = fl.TransferEngine(provider="tcp", interfaces=["lo"], idle_policy="spin")
    yield e
    e.stop()


LAYERS = 24


def test_torch_kernels_bump_the_watcher(engine):
    seen = _Recorder()
    with engine.alloc_scalar_watcher(seen) as w:
        word = torch.as_tensor(_Word(w.ptr), device="cuda")
        assert word.data_ptr() == w.ptr
        for round_ in range(3):
            for _ in range(LAYERS):
                word.add_(1)  # one kernel per "layer"
                torch.cuda._sleep(20_000)  # ~10 us of GPU time between layers
            torch.cuda.synchronize()
            assert _wait(lambda: seen.last() == (round_ + 1) * LAYERS), (round_, seen.last())
        seen.check_growing()
        print(f"[info] direct: the Python callback saw {len(seen.pairs)} of {3 * LAYERS} values")


def test_torch_cuda_graph_replays_bump_the_watcher(engine):
    seen = _Recorder()
    with engine.alloc_scalar_watcher(seen) as w:
        word = torch.as_tensor(_Word(w.ptr), device="cuda")
        stream = torch.cuda.Stream()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.stream(stream):
            with torch.cuda.graph(graph, stream=stream):
                for _ in range(LAYERS):
                    word.add_(1)
                    torch.cuda._sleep(20_000)
        torch.cuda.synchronize()
        for replay in range(4):
            graph.replay()
            torch.cuda.synchronize()
            assert _wait(lambda: seen.last() == (replay + 1) * LAYERS), (replay, seen.last())
        seen.check_growing()
        print(f"[info] graph: the Python callback saw {len(seen.pairs)} of {4 * LAYERS} values")


def _kernels():
    path = os.environ.get("FABRIC_LIB_DEVICE_KERNELS")
    if not path or not os.path.exists(path):
        pytest.skip("FABRIC_LIB_DEVICE_KERNELS does not name libfabric_device_kernels.so")
    lib = ctypes.CDLL(path)
    lib.fl_roundtrip_run.restype = ctypes.c_int
    lib.fl_roundtrip_run.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int, ctypes.c_int, ctypes.c_uint64,
                                     ctypes.POINTER(ctypes.c_double), ctypes.POINTER(ctypes.c_double)]
    return lib


def _stats(values):
    v = sorted(values)
    return {"p50": v[len(v) // 2], "p99": v[min(len(v) - 1, int(0.99 * len(v)))], "mean": sum(v) / len(v),
            "min": v[0], "max": v[-1]}


@pytest.mark.parametrize("use_graph", [False, True], ids=["direct", "graph"])
def test_python_callback_round_trip_latency(engine, use_graph):
    lib = _kernels()
    ack = fl.alloc_mapped_word()
    ack_slot = ctypes.c_uint64.from_address(ack.host_ptr)

    def answer(old: int, new: int) -> bool:
        ack_slot.value = new  # an aligned 8-byte store: atomic, and ordered after the read on x86
        return True

    with engine.alloc_scalar_watcher(answer) as w, ack:
        n = 5000
        warm = (ctypes.c_double * 500)()
        out = (ctypes.c_double * n)()
        gt = (ctypes.c_double * n)()
        assert lib.fl_roundtrip_run(w.ptr, ack.ptr, 500, int(use_graph), 2_000_000_000, warm, None) == 0
        rc = lib.fl_roundtrip_run(w.ptr, ack.ptr, n, int(use_graph), 2_000_000_000, out, gt)
        assert rc == 0, f"fl_roundtrip_run returned {rc}"
    s = _stats(list(out))
    g = _stats(list(gt))
    launch = "graph" if use_graph else "direct"
    print(f"[info] python watcher round trip ({launch}): p50 {s['p50']:.0f} ns, p99 {s['p99']:.0f} ns, "
          f"mean {s['mean']:.0f} ns (globaltimer p50 {g['p50']:.0f} ns)")
    csv = os.environ.get("FABRIC_LIB_BENCH_CSV")
    if csv:
        with open(csv, "a") as f:
            f.write(f"python_watcher,{launch},{n},{s['p50']:.1f},{s['p99']:.1f},{s['mean']:.1f},{s['min']:.1f},"
                    f"{s['max']:.1f},{g['p50']:.1f},{g['mean']:.1f}\n")
    assert s["p50"] > 0

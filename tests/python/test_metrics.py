"""engine.metrics() and the Prometheus endpoint from Python: the dict's counters equal what a burst
of writes between two engines moved, and the C++ EngineStats read from the same cells; its keys
are the ones the .pyi declares (MetricsDict and the dicts inside); the endpoint's text parses with
Debian's python3-prometheus-client and carries the same values; fabric-top --once renders the
peer."""

from __future__ import annotations

import ast
import asyncio
import os
import subprocess
import sys
import threading
import urllib.request

import numpy as np
import pytest

try:  # Debian's python3-prometheus-client (scripts/install-deps.sh); only the endpoint test needs it
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:  # pragma: no cover
    text_string_to_metric_families = None

import fabric_lib as fl

OPTS = dict(provider="tcp", domains_per_group=2, interfaces=["lo"])
FABRIC_TOP = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "fabric_top", "fabric_top.py")
WRITES, LENGTH = 25, 256 * 1024


def sample(text: str, name: str, **labels: str) -> float:
    total, found = 0.0, False
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
                found = True
    assert found, f"no sample {name} {labels}"
    return total


@pytest.fixture()
def pair():
    try:
        sender = fl.TransferEngine(**OPTS, metrics_endpoint="127.0.0.1:0")
    except fl.UnsupportedError:  # built without prometheus-cpp: the dict still works
        sender = fl.TransferEngine(**OPTS)
    receiver = fl.TransferEngine(**OPTS)
    src = np.full(LENGTH, 7, dtype=np.uint8)
    dst = np.zeros(LENGTH, dtype=np.uint8)
    handle, _ = sender.register_tensor(src)
    _, desc = receiver.register_tensor(dst)
    yield sender, receiver, handle, desc
    sender.stop()
    receiver.stop()


def write_burst(sender, handle, desc, n: int) -> None:
    async def run():
        await asyncio.gather(*(sender.write_async(handle, 0, LENGTH, 77, desc, 0) for _ in range(n)))

    asyncio.run(run())


def test_metrics_dict_counts_what_was_written(pair):
    sender, receiver, handle, desc = pair
    write_burst(sender, handle, desc, WRITES)
    shards = fl.imm_count_of_write(LENGTH, sender.nets_per_gpu)
    asyncio.run(receiver.wait_imm_count(77, shards * WRITES, timeout=10))
    m = sender.metrics()
    w = m["ops"]["write"]
    assert m["detailed"] is True
    assert (w["requests_submitted"], w["requests_completed"], w["requests_failed"]) == (WRITES, WRITES, {})
    assert w["wrs_posted"] == w["wrs_completed"] == shards * WRITES
    assert w["request_latency"]["count"] == WRITES and w["request_latency"]["p99"] > 0
    assert m["bytes_written"] == WRITES * LENGTH
    assert [d["bytes_written"] for d in m["domains"]] == [WRITES * LENGTH // 2] * 2
    (peer,) = m["peers"]
    assert peer["address"] == str(receiver.main_address)
    assert (peer["health"], peer["paths_up"], peer["inflight"]) == ("healthy", 2, 0)
    assert peer["bytes_written"] == WRITES * LENGTH
    assert receiver.metrics()["imms_received"] == shards * WRITES
    assert receiver.metrics()["ops"]["write"]["requests_submitted"] == 0
    # The C++ EngineStats (stats()) counts from the same cells.
    st = sender.stats()
    assert st["requests_submitted"] == sum(o["requests_submitted"] for o in m["ops"].values()) == WRITES
    assert st["requests_completed"] == WRITES and st["requests_failed"] == 0
    assert st["wrs_posted"] == sum(d["wrs_posted"] for d in m["domains"]) == shards * WRITES


def test_metrics_off_keeps_the_counters_and_drops_peers_and_histograms(pair):
    sender, receiver, _, desc = pair
    off = fl.TransferEngine(**OPTS, metrics=False)
    try:
        src = np.full(LENGTH, 3, dtype=np.uint8)
        handle, _ = off.register_tensor(src)
        write_burst(off, handle, desc, 3)
        m = off.metrics()
        assert m["detailed"] is False and m["peers"] == []
        assert m["ops"]["write"]["requests_completed"] == 3 and m["bytes_written"] == 3 * LENGTH
        assert m["ops"]["write"]["request_latency"]["count"] == 0
    finally:
        off.stop()


def _stub_fields() -> dict:
    """The TypedDicts of the .pyi: name -> its declared keys."""
    stub = os.path.join(os.path.dirname(fl.__file__), "_fabric_lib.pyi")
    with open(stub) as f:
        tree = ast.parse(f.read())
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and any(getattr(b, "id", None) == "TypedDict" for b in node.bases):
            out[node.name] = {n.target.id for n in node.body if isinstance(n, ast.AnnAssign)}
    return out


def test_metrics_keys_are_the_ones_the_stub_documents(pair):
    sender, receiver, handle, desc = pair
    write_burst(sender, handle, desc, 2)
    shapes = _stub_fields()
    m = sender.metrics()
    assert set(m) == shapes["MetricsDict"]
    assert set(m["ops"]) == {"write", "paged_write", "scatter", "barrier", "imm", "send"}
    for op in m["ops"].values():
        assert set(op) == shapes["OpMetricsDict"]
        assert set(op["request_latency"]) == shapes["LatencyHistogramDict"]
    assert m["domains"] and all(set(d) == shapes["DomainMetricsDict"] for d in m["domains"])
    assert m["peers"] and all(set(p) == shapes["PeerMetricsDict"] for p in m["peers"])
    assert len(m["ops"]["write"]["request_latency"]["buckets"]) == 25


def test_endpoint_text_parses_and_fabric_top_renders(pair):
    sender, receiver, handle, desc = pair
    endpoint = sender.metrics_endpoint
    if not endpoint:
        pytest.skip("this build has no Prometheus endpoint (prometheus-cpp-dev was not found)")
    if text_string_to_metric_families is None:
        pytest.skip("python3-prometheus-client is not installed")
    assert endpoint.startswith("127.0.0.1:") and not endpoint.endswith(":0")
    write_burst(sender, handle, desc, WRITES)
    text = urllib.request.urlopen(f"http://{endpoint}/metrics", timeout=10).read().decode()
    peer = str(receiver.main_address)
    assert sample(text, "fabric_lib_requests_completed_total", op="write") == WRITES
    assert sample(text, "fabric_lib_peer_bytes_written_total", peer=peer) == WRITES * LENGTH
    assert sample(text, "fabric_lib_request_latency_seconds_count", op="write") == WRITES
    assert sample(text, "fabric_lib_peer_health", peer=peer) == 0

    # fabric-top while writes keep going: the peer's row shows throughput and health.
    stop = threading.Event()

    def keep_writing():
        while not stop.is_set():
            write_burst(sender, handle, desc, 4)

    t = threading.Thread(target=keep_writing)
    t.start()
    try:
        r = subprocess.run([sys.executable, FABRIC_TOP, "--once", "--interval", "0.5", endpoint],
                           capture_output=True, text=True, timeout=30)
    finally:
        stop.set()
        t.join()
    assert r.returncode == 0, r.stderr
    rows = [line for line in r.stdout.splitlines() if "healthy" in line]
    assert len(rows) == 1, r.stdout
    assert "KB/s" in rows[0] or "MB/s" in rows[0] or "GB/s" in rows[0], r.stdout
    assert any(line.startswith("write ") for line in r.stdout.splitlines()), r.stdout
    bad = subprocess.run([sys.executable, FABRIC_TOP, "--once", "127.0.0.1:1"], capture_output=True, text=True, timeout=30)
    assert bad.returncode == 1 and "fabric-top" in bad.stderr

#!/usr/bin/python3
"""fabric-top --once against a live endpoint: metrics_source (an engine writing to a peer while it
serves its Prometheus endpoint) runs while fabric-top takes its two scrapes; the frame must show
that peer (its full address, as the endpoint labels it) healthy with both paths up, non-zero
throughput and bytes, WR latency percentiles, and the write requests completed. fabric-top must
also fail (exit 1, reason on stderr) against a port nobody listens on.

usage: fabric_top_test.py METRICS_SOURCE FABRIC_TOP
"""

import re
import select
import socket
import subprocess
import sys

FIRST_LINE_TIMEOUT = 30  # seconds: two engines built and connected (well under 1 s when idle)


def fail(msg: str, *outputs: str) -> None:
    print("FAIL: " + msg)
    for o in outputs:
        print("---\n" + o)
    sys.exit(1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    source_bin, top = sys.argv[1], sys.argv[2]
    source = subprocess.Popen([source_bin], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    try:
        ready, _, _ = select.select([source.stdout], [], [], FIRST_LINE_TIMEOUT)
        first = source.stdout.readline() if ready else ""
        m = re.fullmatch(r"endpoint (127\.0\.0\.1:\d+) peer ([0-9a-f]+)\n", first)
        if not m:
            source.kill()
            fail(f"metrics_source printed {first!r}", source.stderr.read())
        endpoint, peer = m.group(1), m.group(2)
        r = subprocess.run([sys.executable, top, "--once", "--interval", "1", endpoint], capture_output=True,
                           text=True, timeout=60)
    finally:
        if source.poll() is None:
            source.stdin.close()  # ends the writes; it drains, prints what it moved and exits
    try:
        source.wait(timeout=60)  # its output is a few lines: the pipes cannot fill
    except subprocess.TimeoutExpired:
        source.kill()
        fail("metrics_source did not exit after stdin closed")
    moved, err = source.stdout.read(), source.stderr.read()
    if source.returncode != 0 or not moved.startswith("moved "):
        fail(f"metrics_source exited {source.returncode}", moved, err)
    frame = r.stdout
    if r.returncode != 0:
        fail(f"fabric-top exited {r.returncode}", frame, r.stderr)

    rows = [line for line in frame.splitlines() if line.endswith("  " + peer)]
    if len(rows) != 1:
        fail(f"no single row for peer {peer}", frame)
    cols = rows[0].split()
    # GROUP THROUGHPUT(value unit) WR/s BYTES(value unit) HEALTH PATHS INFLIGHT FAILED p50 p99 PEER
    if len(cols) != 13:
        fail(f"peer row has {len(cols)} columns", frame)
    group, rate, rate_unit, wrs, total, total_unit, health, paths = cols[:8]
    failed, p50, p99 = cols[9], cols[10], cols[11]
    checks = [
        (group == "0", "group 0"),
        (float(rate) > 0 and rate_unit.endswith("B/s"), "non-zero throughput"),
        (float(wrs) > 0, "non-zero WR rate"),
        (float(total) > 0 and total_unit in ("KB", "MB", "GB", "TB"), "non-zero bytes written (at least 64 KB)"),
        (health == "healthy", "healthy"),
        (paths == "2", "both paths up"),
        (failed == "0", "no failed WRs"),
        (re.fullmatch(r"\d+(\.\d+)?(us|ms|s)", p50) is not None, "a p50 latency"),
        (re.fullmatch(r"\d+(\.\d+)?(us|ms|s)", p99) is not None, "a p99 latency"),
    ]
    for ok, what in checks:
        if not ok:
            fail("peer row lacks " + what + ": " + rows[0], frame)
    writes = [line.split() for line in frame.splitlines() if line.startswith("write ")]
    if len(writes) != 1 or int(writes[0][2]) <= 0 or writes[0][3] != "0":
        fail("no write row with completed requests and no failures", frame)

    bad = subprocess.run([sys.executable, top, "--once", "--interval", "0.1", f"127.0.0.1:{free_port()}"],
                         capture_output=True, text=True, timeout=30)
    if bad.returncode != 1 or "fabric-top" not in bad.stderr:
        fail(f"fabric-top against a closed port exited {bad.returncode}", bad.stdout, bad.stderr)
    print(f"ok: {rows[0].strip()}; metrics_source {moved.strip()}")


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""fabric-top: a terminal view of a running fabric-lib engine's Prometheus endpoint.

Scrapes http://<endpoint>/metrics (TransferEngineBuilder::metrics_endpoint) every second and shows,
per peer, throughput (bytes written since the last scrape), WR rate, bytes written in all, health,
paths up, WRs in flight, failed WRs and WR latency percentiles over the interval (the whole run's
when nothing completed in it), then per operation type the request rate, completions, failures
and request latency percentiles, and the health events. The peer is the last column, in full
(the endpoint's peer label: the peer's domain-0 address in hex). It reads the text format itself
(standard library only).

    fabric-top 127.0.0.1:9464            refresh every second until Ctrl-C
    fabric-top --once 127.0.0.1:9464     two scrapes --interval apart, one frame, exit 0
                                         (exit 1 when the endpoint cannot be read)
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import time
import urllib.request
from typing import Dict, List, Optional, Tuple

Labels = Tuple[Tuple[str, str], ...]
Samples = Dict[str, Dict[Labels, float]]

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+-?\d+)?$')
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?')
HEALTH = {0: "healthy", 1: "degraded", 2: "UNREACHABLE"}


_ESCAPES = {"n": "\n", "\\": "\\", '"': '"'}


def _unescape(v: str) -> str:
    """A label value of the text format: \\n, \\\\ and \\" are its only escapes (left to right)."""
    return re.sub(r'\\(.)', lambda m: _ESCAPES.get(m.group(1), "\\" + m.group(1)), v)


def parse_text(text: str) -> Samples:
    """Samples by metric name, then by sorted label tuple. Raises ValueError on a bad line."""
    out: Samples = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            raise ValueError(f"line {n}: not a sample: {line!r}")
        labels: List[Tuple[str, str]] = []
        body = m.group(3) or ""
        pos = 0
        while pos < len(body):
            lm = _LABEL.match(body, pos)
            if not lm:
                raise ValueError(f"line {n}: bad labels: {body!r}")
            labels.append((lm.group(1), _unescape(lm.group(2))))
            pos = lm.end()
        out.setdefault(m.group(1), {})[tuple(sorted(labels))] = float(m.group(4))
    return out


def scrape(endpoint: str, timeout: float = 5.0) -> Samples:
    url = endpoint if endpoint.startswith("http") else f"http://{endpoint}/metrics"
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return parse_text(r.read().decode())


def _get(s: Samples, name: str, **match: str) -> float:
    total = 0.0
    for labels, v in s.get(name, {}).items():
        d = dict(labels)
        if all(d.get(k) == val for k, val in match.items()):
            total += v
    return total


def _series(s: Samples, name: str, key: str) -> List[str]:
    return sorted({dict(l).get(key, "") for l in s.get(name, {})})


def quantile(buckets: List[Tuple[float, float]], q: float) -> Optional[float]:
    """q-quantile of cumulative (le, count) buckets, interpolated as Prometheus' histogram_quantile."""
    buckets = sorted(buckets)
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    prev_le, prev_c = 0.0, 0.0
    for le, c in buckets:
        if c >= rank:
            if math.isinf(le):
                return prev_le
            if c == prev_c:
                return le
            return prev_le + (le - prev_le) * (rank - prev_c) / (c - prev_c)
        prev_le, prev_c = le, c
    return prev_le


def _buckets(cur: Samples, prev: Optional[Samples], name: str, **match: str) -> List[Tuple[float, float]]:
    """Cumulative buckets of `name`_bucket over the interval (cur - prev), or since start."""
    out: Dict[float, float] = {}
    for src, sign in ((cur, 1.0), (prev, -1.0)):
        if src is None:
            continue
        for labels, v in src.get(name + "_bucket", {}).items():
            d = dict(labels)
            if all(d.get(k) == val for k, val in match.items()):
                le = float(d["le"])
                out[le] = out.get(le, 0.0) + sign * v
    return sorted(out.items())


def _fmt_rate(bytes_per_s: float) -> str:
    for unit in ("B/s", "KB/s", "MB/s", "GB/s"):
        if bytes_per_s < 1000 or unit == "GB/s":
            return f"{bytes_per_s:7.1f} {unit}"
        bytes_per_s /= 1000
    return ""


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return ""


def _fmt_s(v: Optional[float]) -> str:
    if v is None:
        return "      -"
    if v * 1e6 < 999.5:  # thresholds after rounding: 999.7 us prints as 1.0ms, not 1000us
        return f"{v * 1e6:5.0f}us"
    if v * 1e3 < 999.95:
        return f"{v * 1e3:5.1f}ms"
    return f"{v:6.2f}s"


def render(cur: Samples, prev: Optional[Samples], dt: float, endpoint: str) -> str:
    rows = [f"fabric-top  {endpoint}  interval {dt:.1f}s  " + time.strftime("%H:%M:%S")]
    rows.append("")
    rows.append(f"{'GROUP':>5} {'THROUGHPUT':>12} {'WR/s':>9} {'BYTES':>10} {'HEALTH':>11} {'PATHS':>5} "
                f"{'INFLIGHT':>8} {'FAILED':>7} {'p50':>7} {'p99':>7}  PEER")
    peers = sorted({(dict(l).get("group", ""), dict(l).get("peer", "")) for l in cur.get("fabric_lib_peer_health", {})})
    for group, peer in peers:
        m = {"group": group, "peer": peer}

        def delta(name: str) -> float:
            return _get(cur, name, **m) - (_get(prev, name, **m) if prev else 0.0)

        rate = delta("fabric_lib_peer_bytes_written_total") / dt if prev else 0.0
        wrs = delta("fabric_lib_peer_wrs_completed_total") / dt if prev else 0.0
        total = _get(cur, "fabric_lib_peer_bytes_written_total", **m)
        health = HEALTH.get(int(_get(cur, "fabric_lib_peer_health", **m)), "?")
        paths = int(_get(cur, "fabric_lib_peer_paths_up", **m))
        inflight = int(_get(cur, "fabric_lib_peer_inflight_wrs", **m))
        failed = int(_get(cur, "fabric_lib_peer_wrs_failed_total", **m))
        b = _buckets(cur, prev, "fabric_lib_peer_wr_latency_seconds", **m)
        if not b or b[-1][1] <= 0:  # nothing completed in the interval: the whole run's
            b = _buckets(cur, None, "fabric_lib_peer_wr_latency_seconds", **m)
        rows.append(f"{group:>5} {_fmt_rate(rate):>12} {wrs:9.0f} {_fmt_bytes(total):>10} {health:>11} {paths:>5} "
                    f"{inflight:>8} {failed:>7} {_fmt_s(quantile(b, 0.5)):>7} {_fmt_s(quantile(b, 0.99)):>7}  {peer}")
    if not peers:
        rows.append("(no peers: nothing written yet, or the engine runs with metrics off)")
    rows.append("")
    rows.append(f"{'OP':<12} {'REQ/s':>9} {'COMPLETED':>10} {'FAILED':>7} {'p50':>7} {'p99':>7}")
    for op in _series(cur, "fabric_lib_requests_submitted_total", "op"):
        if _get(cur, "fabric_lib_requests_submitted_total", op=op) == 0:
            continue
        done = _get(cur, "fabric_lib_requests_completed_total", op=op)
        rate = (done - _get(prev, "fabric_lib_requests_completed_total", op=op)) / dt if prev else 0.0
        failed = int(_get(cur, "fabric_lib_requests_failed_total", op=op))
        b = _buckets(cur, prev, "fabric_lib_request_latency_seconds", op=op)
        if not b or b[-1][1] <= 0:
            b = _buckets(cur, None, "fabric_lib_request_latency_seconds", op=op)
        rows.append(f"{op:<12} {rate:9.0f} {int(done):>10} {failed:>7} {_fmt_s(quantile(b, 0.5)):>7} "
                    f"{_fmt_s(quantile(b, 0.99)):>7}")
    events = {dict(l).get("event"): v for l, v in cur.get("fabric_lib_health_events_total", {}).items()}
    rows.append("")
    rows.append("events: " + "  ".join(f"{k}={int(v)}" for k, v in sorted(events.items()) if k) +
                f"  deadlines_exceeded={int(_get(cur, 'fabric_lib_deadlines_exceeded_total'))}"
                f"  groups_abandoned={int(_get(cur, 'fabric_lib_watchdog_groups_abandoned_total'))}")
    return "\n".join(rows)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="fabric-top", description=__doc__.splitlines()[0])
    ap.add_argument("endpoint", help="host:port of the engine's metrics endpoint (or a full URL)")
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between scrapes (default 1)")
    ap.add_argument("--once", action="store_true", help="print one frame (two scrapes) and exit")
    args = ap.parse_args(argv)
    try:
        prev = scrape(args.endpoint)
        t_prev = time.monotonic()
        while True:
            time.sleep(args.interval)
            cur = scrape(args.endpoint)
            t = time.monotonic()
            frame = render(cur, prev, t - t_prev, args.endpoint)
            if args.once:
                print(frame)
                return 0
            sys.stdout.write("\x1b[H\x1b[2J" + frame + "\n")
            sys.stdout.flush()
            prev, t_prev = cur, t
    except (OSError, ValueError) as e:
        print(f"fabric-top: {args.endpoint}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())

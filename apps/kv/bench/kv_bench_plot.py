#!/usr/bin/env python3
"""Draws fabric-kv-bench's results from its CSV (one or more runs appended, e.g. several page
sizes): KV bandwidth through the app vs the engine's paged writes, by page size.

usage: kv_bench_plot.py RESULTS.csv OUT.png
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    rows = [r for r in csv.DictReader(open(sys.argv[1])) if r.get("section") == "bandwidth"]
    if not rows:
        print("kv_bench_plot: no bandwidth rows", file=sys.stderr)
        return 1
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for key in sorted({(r["provider"], r["domains"]) for r in rows}):
        mine = sorted((r for r in rows if (r["provider"], r["domains"]) == key), key=lambda r: int(r["page_bytes"]))
        x = [int(r["page_bytes"]) / 1024 for r in mine]
        label = f"{key[0]}, {key[1]} dom"
        ax.plot(x, [float(r["value"]) for r in mine], "o-", label=f"app ({label})")
        ax.plot(x, [float(r["baseline"]) for r in mine], "s--", label=f"engine paged writes ({label})")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("page size (KiB)")
    ax.set_ylabel("Gbps")
    ax.set_title("fabric_lib.kv: KV bandwidth vs the engine's paged writes (same run)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Draws fabric-bench's bandwidth vs size (engine and raw libfabric) from its CSV.

usage: fabric_bench_plot.py RESULTS.csv OUT.png
One panel per bandwidth mode (single, paged); one colour per domain count; solid = engine,
dashed = raw fi_writedata baseline measured in the same run.
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
    rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["mode"] in ("single", "paged") and r["engine_gbps"]]
    if not rows:
        print("fabric_bench_plot: no single/paged rows to plot", file=sys.stderr)
        return 1
    modes = [m for m in ("single", "paged") if any(r["mode"] == m for r in rows)]
    fig, axes = plt.subplots(1, len(modes), figsize=(6.5 * len(modes), 4.5), squeeze=False)
    provider = rows[0]["provider"]
    for ax, mode in zip(axes[0], modes):
        mine = [r for r in rows if r["mode"] == mode]
        for i, domains in enumerate(sorted({int(r["domains"]) for r in mine})):
            pts = sorted((int(r["size"]), r) for r in mine if int(r["domains"]) == domains)
            sizes = [s for s, _ in pts]
            colour = "C%d" % i
            ax.plot(sizes, [float(r["engine_gbps"]) for _, r in pts], "o-", color=colour,
                    label="engine, %d domain%s" % (domains, "" if domains == 1 else "s"))
            raw = [(s, float(r["raw_gbps"])) for s, r in pts if r["raw_gbps"]]
            if raw:
                ax.plot([s for s, _ in raw], [g for _, g in raw], "x--", color=colour,
                        label="raw libfabric, %d domain%s" % (domains, "" if domains == 1 else "s"))
        ax.set_xscale("log", base=2)
        ax.set_xlabel("write size (bytes)" if mode == "single" else "page size (bytes)")
        ax.set_ylabel("Gbps")
        ax.set_title("%s writes, %s" % (mode, provider))
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Draws the MoE benchmark (moe_device_tests --bench) from its CSV.

usage: moe_bench_plot.py moe_bench.csv OUT.png
One panel per shape (decode, prefill): dispatch and combine p50 (bars) and p99 (whiskers) per
path and EP size, rank 0's view; a third panel: the proxy's reaction and posting times.
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
    rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["rank"] == "0"]
    if not rows:
        print("moe_bench_plot: no rows", file=sys.stderr)
        return 1
    shapes = [s for s in ("decode", "prefill") if any(r["shape"] == s for r in rows)]
    fig, axes = plt.subplots(1, len(shapes) + 1, figsize=(5.5 * (len(shapes) + 1), 4.5), squeeze=False)
    for ax, shape in zip(axes[0], shapes):
        labels, p50, p99 = [], [], []
        for r in rows:
            if r["shape"] == shape and r["metric"] in ("dispatch_us", "combine_us"):
                labels.append(f'{r["metric"][:-3]}\n{r["path"]} EP{r["world"]}')
                p50.append(float(r["p50"]))
                p99.append(float(r["p99"]))
        x = range(len(labels))
        ax.bar(x, p50, yerr=[[0] * len(p50), [b - a for a, b in zip(p50, p99)]], capsize=3)
        ax.set_xticks(list(x))
        ax.set_xticklabels(labels, fontsize=7)
        ax.set_ylabel("µs (bar p50, whisker p99)")
        ax.set_title(f"{shape}: DeepSeek-V3 shape, fp8 dispatch / bf16 combine")
    ax = axes[0][-1]
    proxy = [r for r in rows if r["metric"] in ("proxy_reaction_us", "proxy_posting_per_step_us")]
    labels = [f'{r["metric"][6:-3]}\n{r["shape"]} EP{r["world"]}' for r in proxy]
    ax.bar(range(len(proxy)), [float(r["p50"]) for r in proxy])
    ax.axhline(5.0, color="red", linestyle="--", label="reaction target p50 5 µs")
    ax.set_xticks(list(range(len(proxy))))
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_ylabel("µs p50")
    ax.set_title("host proxy (proxy path)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)
    print(f"moe_bench_plot: wrote {sys.argv[2]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

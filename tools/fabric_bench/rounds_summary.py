#!/usr/bin/env python3
"""Summarizes rounds of fabric-bench runs of several shapes (A/B/C... of one build).

Reads a log in which each run starts with a header line

    == r<round> pos<position> <shape>

(position: where the shape ran in its round, 0 first) followed by fabric-bench's output, whose
table rows read "<mode> <size> <unit> <engine Gbps> <raw Gbps> <ratio>x ...". Prints, per point
(mode and size) and shape, the median engine and raw Gbps over the rounds every shape completed;
each shape's median ratio to the first shape (the reference) with the rounds in which it was
ahead; and the median engine Gbps by position, which shows whether running first, second or
third matters on the machine (on one H100 on 2026-12-07 it did: docs/gpu.md).

Usage: rounds_summary.py LOG [--reference SHAPE]
Exit status 1 when the log holds no complete round (nothing to compare).
"""
import argparse
import re
import statistics
import sys

HEADER = re.compile(r"^== r(\d+) pos(\d+) (.+?)\s*$")
ROW = re.compile(r"^(single|paged|scatter)\s+(\d+ [KMG]iB)\s+([\d.]+)\s+([\d.]+)\s+[\d.]+x\b")


def parse(lines):
    """Returns {(mode, size): {shape: {round: (engine, raw, position)}}} and the shapes in order."""
    points, shapes, current = {}, [], None
    for line in lines:
        m = HEADER.match(line)
        if m:
            current = (int(m.group(1)), int(m.group(2)), m.group(3))
            if current[2] not in shapes:
                shapes.append(current[2])
            continue
        m = ROW.match(line)
        if m and current:
            rnd, pos, shape = current
            point = points.setdefault((m.group(1), m.group(2)), {})
            point.setdefault(shape, {})[rnd] = (float(m.group(3)), float(m.group(4)), pos)
    return points, shapes


def summarize(points, shapes, reference):
    """The report's lines; an empty list when no point has a round every shape completed."""
    out = []
    for (mode, size), by_shape in points.items():
        if any(s not in by_shape for s in shapes):
            continue
        rounds = sorted(set.intersection(*(set(by_shape[s]) for s in shapes)))
        if not rounds:
            continue
        out.append(f"{mode} {size}: {len(rounds)} rounds")
        ref = by_shape[reference]
        for s in shapes:
            runs = by_shape[s]
            engine = statistics.median(runs[r][0] for r in rounds)
            raw = statistics.median(runs[r][1] for r in rounds)
            line = f"  {s:<24} engine {engine:9.1f} Gbps  raw {raw:9.1f}"
            if s != reference:
                ratios = [runs[r][0] / ref[r][0] for r in rounds]
                ahead = sum(x > 1 for x in ratios)
                line += f"  / {reference}: {statistics.median(ratios):.2f} (ahead in {ahead} of {len(rounds)})"
            out.append(line)
        by_pos = {}
        for s in shapes:
            for r in rounds:
                by_pos.setdefault(by_shape[s][r][2], []).append(by_shape[s][r][0])
        if len(by_pos) > 1:
            medians = ", ".join(f"{p}: {statistics.median(v):.1f}" for p, v in sorted(by_pos.items()))
            out.append(f"  engine Gbps by position in the round (median): {medians}")
    return out


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log")
    parser.add_argument("--reference", help="the shape the others are compared with (default: the first seen)")
    args = parser.parse_args(argv)
    with open(args.log, encoding="utf-8", errors="replace") as f:
        points, shapes = parse(f)
    reference = args.reference or (shapes[0] if shapes else None)
    if reference is not None and reference not in shapes:
        print(f"rounds_summary: no shape named {reference!r} (shapes: {', '.join(shapes)})", file=sys.stderr)
        return 2
    if reference is not None:  # the reference first, the others as they first appeared
        shapes = [reference] + [s for s in shapes if s != reference]
    report = summarize(points, shapes, reference) if shapes else []
    if not report:
        print("rounds_summary: no round in which every shape ran", file=sys.stderr)
        return 1
    print("\n".join(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env python3
"""tools/fabric_bench/rounds_summary.py against logs whose answers are known: the medians, the
ratios to the reference and the rounds ahead, the medians by position, a round missing a shape
left out, and its exit codes (1: no complete round, 2: an unknown reference)."""
import os
import subprocess
import sys
import tempfile

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "fabric_bench", "rounds_summary.py")


def row(mode, size, engine, raw):
    return f"{mode:<12} {size:>10} {engine:12.2f} {raw:9.2f} {engine / raw:6.2f}x        0.432     0.176"


def run(text, *args):
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(text)
    try:
        return subprocess.run([sys.executable, SCRIPT, f.name, *args], capture_output=True, text=True)
    finally:
        os.unlink(f.name)


def main():
    # Three rounds of shapes a / b, order flipping; b is 0.9x of a in rounds 1 and 2 and 1.2x in
    # round 3 (skewed values: a mean would read other figures than the medians asserted).
    lines = []
    a = {1: 100.0, 2: 130.0, 3: 90.0}
    b = {1: 90.0, 2: 117.0, 3: 108.0}
    for r in (1, 2, 3):
        order = ["a", "b"] if r % 2 else ["b", "a"]
        for pos, shape in enumerate(order):
            lines.append(f"== r{r} pos{pos} {shape}")
            lines.append("fabric-bench ipc: some progress line")
            engine = (a if shape == "a" else b)[r]
            lines.append(row("single", "256 KiB", engine, 50.0 if shape == "a" else 40.0))
    # A fourth round in which only a ran: left out of the comparison.
    lines += ["== r4 pos0 a", row("single", "256 KiB", 500.0, 50.0)]
    result = run("\n".join(lines) + "\n", "--reference", "a")
    assert result.returncode == 0, result.stderr
    out = result.stdout.splitlines()
    assert out[0] == "single 256 KiB: 3 rounds", out
    assert out[1].split()[:4] == ["a", "engine", "100.0", "Gbps"], out[1]  # median of 100, 130, 90 (500 left out)
    assert out[2].split()[:4] == ["b", "engine", "108.0", "Gbps"], out[2]
    assert "raw      40.0" in out[2], out[2]
    assert out[2].endswith("/ a: 0.90 (ahead in 1 of 3)"), out[2]  # ratios 0.9, 0.9, 1.2
    # Positions: first 100 (a r1), 117 (b r2), 90 (a r3) -> 100; second 90 (b r1), 130 (a r2), 108 (b r3) -> 108.
    assert out[3] == "  engine Gbps by position in the round (median): 0: 100.0, 1: 108.0", out[3]
    # The default reference is the first shape seen; the reference is listed first.
    flipped = run("\n".join(lines) + "\n", "--reference", "b")
    assert flipped.returncode == 0 and flipped.stdout.splitlines()[1].split()[0] == "b", flipped.stdout
    # Nothing complete: exit 1 with a reason; an unknown reference: exit 2.
    lonely = run("== r1 pos0 a\n" + row("single", "64 KiB", 1.0, 1.0) + "\n== r2 pos0 b\n" + row("paged", "4 KiB", 1.0, 1.0) + "\n")
    assert lonely.returncode == 1 and "no round" in lonely.stderr, (lonely.returncode, lonely.stderr)
    unknown = run("\n".join(lines) + "\n", "--reference", "c")
    assert unknown.returncode == 2 and "no shape named 'c'" in unknown.stderr, (unknown.returncode, unknown.stderr)
    empty = run("nothing here\n")
    assert empty.returncode == 1, empty.returncode
    print("rounds_summary: all checks passed")


if __name__ == "__main__":
    main()

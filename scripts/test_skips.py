#!/usr/bin/env python3
"""Says which tests of a ctest run were skipped and why, for scripts/test.sh's summary line.

Usage: test_skips.py CTEST_LOG LAST_TEST_LOG
  CTEST_LOG       what ctest printed (its "The following tests did not run:" list)
  LAST_TEST_LOG   Testing/Temporary/LastTest.log (every test's output: the skip messages)

Prints one line, "skipped N" or "skipped N: <count> x <reason>; ...". Exits 1 when a test was
skipped for a reason that tests/README.md ("Skips") does not document for this machine: on the CI
machine (root, packages installed by scripts/install-deps.sh) only hardware may skip a test.
"""

from __future__ import annotations

import collections
import os
import re
import sys

# Documented reasons (tests/README.md, "Skips"), and whether each may happen on this machine.
ALLOWED = [
    # Hardware: gpu_api_test checks the Unsupported answers of a build without a usable GPU.
    (re.compile(r"a CUDA device is usable here"), lambda: True),
    # Hardware: a CUDA build's GPU tests (weights over the IPC backend) need a device to run on.
    (re.compile(r"no usable CUDA device here"), lambda: True),
    # The fault-injection tests need root; the CI machine runs the suite as root.
    (re.compile(r"needs root"), lambda: os.geteuid() != 0),
]


def skipped_tests(ctest_log: str) -> list[str]:
    names, listing = [], False
    for line in ctest_log.splitlines():
        if line.startswith("The following tests did not run:"):
            listing = True
            continue
        if listing:
            m = re.match(r"\s*\d+ - (.*?)(?:  # .*)? \((Skipped|Disabled|Not Run)\)\s*$", line)
            if not m:
                if line.strip():
                    listing = False
                continue
            names.append(m.group(1).strip())
    return names


def reason_of(name: str, last_log: str) -> str:
    # The test's block: from its "Test: <name>" line to its "end time" line.
    start = last_log.find("Test: " + name)
    if start < 0:
        return "no output recorded"
    end = last_log.find("end time:", start)
    block = last_log[start : end if end > 0 else len(last_log)]
    lines = block.splitlines()
    for i, line in enumerate(lines):
        if line.endswith(": Skipped") and i + 1 < len(lines):  # GoogleTest's GTEST_SKIP() message
            return lines[i + 1].strip() or "no reason given"
    out = block.split("Output:", 1)[-1]
    for line in out.splitlines():
        line = line.strip("- ").strip()
        if line and not line.startswith("Note:"):
            return line
    return "no reason given"


def main() -> int:
    ctest_log = open(sys.argv[1], errors="replace").read()
    last_log = open(sys.argv[2], errors="replace").read() if os.path.exists(sys.argv[2]) else ""
    reasons = collections.Counter(reason_of(n, last_log) for n in skipped_tests(ctest_log))
    total = sum(reasons.values())
    undocumented = [r for r in reasons if not any(p.search(r) and ok() for p, ok in ALLOWED)]
    text = f"skipped {total}"
    if total:
        text += ": " + "; ".join(f"{n} x {r}" for r, n in reasons.most_common())
    if undocumented:
        text += " (NOT ALLOWED here: " + "; ".join(undocumented) + ")"
    print(text)
    return 1 if undocumented else 0


if __name__ == "__main__":
    sys.exit(main())

"""The example of docs/moe.md runs as written (two CPU ranks; combine of doubled experts == 2x)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "docs", "moe.md")


def example() -> str:
    with open(DOC) as f:
        text = f.read()
    m = re.search(r"<!-- moe-example:start -->\s*```python\n(.*?)```\s*<!-- moe-example:end -->", text, re.S)
    assert m, "docs/moe.md has no example between the moe-example markers"
    return m.group(1)


def test_docs_example_runs(tmp_path):
    script = tmp_path / "moe_example.py"
    script.write_text(example())
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    # The two processes share stdout: their lines may interleave, so match them anywhere.
    found = re.findall(r"rank (\d): \d+ pairs received, combine == 2x: (True|False)", r.stdout)
    assert sorted(found) == [("0", "True"), ("1", "True")], r.stdout
    assert "Traceback" not in r.stderr, r.stderr

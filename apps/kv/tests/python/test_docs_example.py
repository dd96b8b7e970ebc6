"""docs/kv.md's Python example runs as written (in a fresh interpreter)."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

DOC = pathlib.Path(__file__).resolve().parents[4] / "docs" / "kv.md"


def test_the_python_example_in_docs_kv_md_runs():
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) == 1, "docs/kv.md should hold one python example"
    out = subprocess.run([sys.executable, "-c", blocks[0]], capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert out.returncode == 0, out.stderr
    assert "transferred 1 request(s)" in out.stdout

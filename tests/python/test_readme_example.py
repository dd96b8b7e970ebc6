"""The Python example of docs/python.md runs as written (two processes, a numpy array, imm 42)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

README = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "python.md")


def readme_example() -> str:
    with open(README) as f:
        text = f.read()
    m = re.search(r"<!-- python-example:start -->\s*```python\n(.*?)```\s*<!-- python-example:end -->", text, re.S)
    assert m, "docs/python.md has no python example between the python-example markers"
    return m.group(1)


def test_readme_example_runs(tmp_path):
    script = tmp_path / "example.py"
    script.write_text(readme_example())
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "received [0. 1. 2.] equal: True", (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr

"""Completion recorders for tests: each on_done/on_error pair counts its calls, so tests can
check that an operation completed exactly once and how."""

from __future__ import annotations

import threading
import time
from typing import List, Optional

import fabric_lib as fl


class Completion:
    """``on_done`` / ``on_error`` for one operation (or ``expected`` operations sharing it)."""

    def __init__(self, expected: int = 1) -> None:
        self.expected = expected
        self.done = 0
        self.errors: List[fl.FabricError] = []
        self._cv = threading.Condition()

    def on_done(self) -> None:
        with self._cv:
            self.done += 1
            self._cv.notify_all()

    def on_error(self, err: fl.FabricError) -> None:
        assert isinstance(err, fl.FabricError), err
        with self._cv:
            self.errors.append(err)
            self._cv.notify_all()

    @property
    def finished(self) -> int:
        return self.done + len(self.errors)

    def wait(self, timeout: float = 20.0) -> bool:
        """Waits until `expected` completions came (of either kind)."""
        with self._cv:
            return self._cv.wait_for(lambda: self.finished >= self.expected, timeout)

    def wait_ok(self, timeout: float = 20.0) -> None:
        """Waits for `expected` successes; fails on an error or a timeout."""
        assert self.wait(timeout), f"only {self.finished} of {self.expected} completions within {timeout} s"
        assert not self.errors, f"operation failed: {self.errors}"
        assert self.done == self.expected

    def error_codes(self) -> List[str]:
        return [e.code for e in self.errors]


def settle(seconds: float = 0.2) -> None:
    """Gives late (duplicate) completions a chance to show up before counting them."""
    time.sleep(seconds)


def wait_until(pred, timeout: float = 10.0, interval: float = 0.01) -> Optional[bool]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(interval)
    return pred()

"""Completion recorders for tests. Each request reports through callbacks of its own index, so a
duplicate completion is seen even when another request's completion is missing (a shared total
would look right); after waiting for all of them, nothing more may arrive for a quiet interval.

Time bounds: a few times what the operation takes here (a test's transfers finish in well under
a second on the 2-core CI machine), with a floor, so that a slide to "eventually" fails."""

from __future__ import annotations

import threading
import time
from typing import Callable, List, Optional

import fabric_lib as fl

# Waiting for a test's requests to complete (each takes milliseconds; the slowest batches < 1 s).
WAIT_S = 10.0
# After a wait: no completion (or imm) more may arrive for this long. Duplicates come within a
# few polls of the original, microseconds apart.
QUIET_S = 0.1


class Completions:
    """``n`` requests: request ``i`` reports to ``on_done_of(i)`` / ``on_error_of(i)``."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.calls = [0] * n
        self.codes: List[Optional[str]] = [None] * n  # "ok" or the error code
        self.errors: List[fl.FabricError] = []
        self._total = 0
        self._cv = threading.Condition()

    def _record(self, i: int, code: str, err: Optional[fl.FabricError]) -> None:
        with self._cv:
            self.calls[i] += 1
            self._total += 1
            if self.calls[i] == 1:
                self.codes[i] = code
                if err is not None:
                    self.errors.append(err)
            self._cv.notify_all()

    def on_done_of(self, i: int) -> Callable[[], None]:
        return lambda: self._record(i, "ok", None)

    def on_error_of(self, i: int) -> Callable[[fl.FabricError], None]:
        def on_error(err: fl.FabricError) -> None:
            assert isinstance(err, fl.FabricError), err
            self._record(i, err.code, err)

        return on_error

    def callbacks(self, i: int):
        """``(on_done, on_error)`` of request i, to splat into a submit call."""
        return self.on_done_of(i), self.on_error_of(i)

    @property
    def finished(self) -> int:
        """Requests that completed at least once."""
        with self._cv:
            return sum(1 for c in self.calls if c > 0)

    def wait(self, timeout: float = WAIT_S) -> bool:
        """Waits until every request completed (either way)."""
        with self._cv:
            return self._cv.wait_for(lambda: all(c > 0 for c in self.calls), timeout)

    def expect_exactly_once(self, quiet: float = QUIET_S) -> None:
        """No completion arrives during `quiet`, and each request completed exactly once."""
        with self._cv:
            seen = self._total
            arrived = self._cv.wait_for(lambda: self._total != seen, quiet)
            assert not arrived, f"a completion arrived {quiet} s after the wait"
            twice = [i for i, c in enumerate(self.calls) if c != 1]
            assert not twice, f"requests not completed exactly once: {[(i, self.calls[i]) for i in twice]}"

    def wait_ok(self, timeout: float = WAIT_S) -> None:
        """Waits for every request, checks exactly-once over the quiet interval, and that all succeeded."""
        assert self.wait(timeout), f"only {self.finished} of {self.n} requests completed within {timeout} s"
        self.expect_exactly_once()
        assert not self.errors, f"requests failed: {self.errors}"

    def error_codes(self) -> List[str]:
        return [e.code for e in self.errors]


class Completion(Completions):
    """One request: ``on_done`` / ``on_error``."""

    def __init__(self) -> None:
        super().__init__(1)
        self.on_done = self.on_done_of(0)
        self.on_error = self.on_error_of(0)

    @property
    def done(self) -> int:
        return 1 if self.codes[0] == "ok" else 0


def wait_until(pred, timeout: float = WAIT_S, interval: float = 0.001) -> Optional[bool]:
    """Polls a state until it holds (every `interval` s); the last answer after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(interval)
    return pred()

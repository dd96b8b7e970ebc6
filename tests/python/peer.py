"""The remote side of the Python tests: a separate process (multiprocessing, spawn) that owns a
TransferEngine and its registered arrays and obeys commands sent over a pipe. Test processes and
peers exchange DomainAddress and MemoryRegionDescriptor objects by pickling them through the
pipe, so every test also checks that these survive a trip between processes."""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import tempfile
import threading
import time
import traceback
from typing import Any, Dict, List, Tuple

import arrays
import fabric_lib as fl
from waiters import QUIET_S, WAIT_S

DOMAINS = 2  # both sides use two domains per group, so writes over 128 KiB are sharded


def engine_options(provider: str) -> Dict[str, Any]:
    """Constructor arguments for a test engine on `provider` (loopback only)."""
    opts: Dict[str, Any] = {"provider": provider, "domains_per_group": DOMAINS}
    if provider.startswith("tcp"):
        opts["interfaces"] = ["lo"]
    return opts


class _Agent:
    def __init__(self, provider: str) -> None:
        self.engine = fl.TransferEngine(**engine_options(provider))
        self.regions: Dict[str, Tuple[Any, fl.MemoryRegionHandle, fl.MemoryRegionDescriptor]] = {}
        self.observed: List[int] = []
        self.messages: "queue.Queue[bytes]" = queue.Queue()
        self.recv_errors: List[str] = []
        self.rounds: Dict[int, List[int]] = {}  # repeating expectations: rounds seen, in order
        self.ends: Dict[int, Tuple[str, int]] = {}  # ... and how each ended (code, rounds fired)
        self.landed: "queue.Queue[Tuple[int, bytes]]" = queue.Queue()  # submit_recvs_into: (offset, bytes)

    # Each command returns a picklable result.
    def alloc(self, name: str, nbytes: int, seed: int = -1) -> fl.MemoryRegionDescriptor:
        arr = arrays.zeros(nbytes) if seed < 0 else arrays.filled(nbytes, seed)
        handle, desc = self.engine.register_tensor(arr)
        self.regions[name] = (arr, handle, desc)
        return desc

    def read(self, name: str) -> bytes:
        return arrays.to_numpy(self.regions[name][0]).tobytes()

    def clear(self, name: str) -> None:
        self.regions[name][0][:] = 0

    def wait_imms(self, imm: int, n: int, timeout: float) -> Tuple[bool, int]:
        """Expects n of `imm`. Once they came, the count left after a quiet interval (waiters.QUIET_S):
        0 unless more arrived than expected (a duplicate)."""
        reached = threading.Event()
        self.engine.set_imm_count_expected(imm, n, reached.set)
        ok = reached.wait(timeout)
        if not ok:
            self.engine.remove_imm_count(imm)
        else:
            time.sleep(QUIET_S)  # nothing more may arrive meanwhile
        return ok, self.engine.imm_count(imm)

    def expect_after_arrival(self, imm: int, arrived: int, n: int, timeout: float) -> Tuple[int, bool, int]:
        """Waits until `arrived` imms were counted with no expectation, then expects n of them."""
        deadline = time.monotonic() + timeout
        while self.engine.imm_count(imm) < arrived and time.monotonic() < deadline:
            time.sleep(0.005)
        before = self.engine.imm_count(imm)
        reached = threading.Event()
        self.engine.set_imm_count_expected(imm, n, reached.set)
        ok = reached.wait(timeout)
        return before, ok, self.engine.imm_count(imm)

    def imm_count(self, imm: int) -> int:
        return self.engine.imm_count(imm)

    def remove_imm_count(self, imm: int):
        return self.engine.remove_imm_count(imm)

    def observe(self) -> None:
        self.engine.set_imm_callback(self.observed.append)

    def take_observed(self, n: int, timeout: float) -> List[int]:
        """The first `n` imms the observer saw (it may run just after an expectation fired)."""
        deadline = time.monotonic() + timeout
        while len(self.observed) < n and time.monotonic() < deadline:
            time.sleep(0.005)
        out = self.observed[:n]
        del self.observed[:n]
        return out

    def post_recvs(self, count: int, length: int) -> None:
        self.engine.submit_bouncing_recvs(count, length, self.messages.put, lambda e: self.recv_errors.append(e.code))

    def take_messages(self, n: int, timeout: float) -> List[bytes]:
        out = []
        deadline = time.monotonic() + timeout
        while len(out) < n:
            try:
                out.append(self.messages.get(timeout=max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                break
        return out

    def _wait(self, submit) -> str:
        done = threading.Event()
        result: List[str] = []
        submit(lambda: (result.append("ok"), done.set()), lambda e: (result.append(e.code), done.set()))
        if not done.wait(WAIT_S):
            return "timeout"
        return result[0]

    def send(self, addr: fl.DomainAddress, data: bytes) -> str:
        return self._wait(lambda ok, err: self.engine.submit_send(addr, data, ok, err))

    def write_to(self, name: str, desc: fl.MemoryRegionDescriptor, imm: int) -> str:
        """Writes the whole region `name` to offset 0 of `desc`, with `imm`."""
        _, handle, _ = self.regions[name]
        return self._wait(lambda ok, err: self.engine.submit_write(handle, 0, handle.length, imm, desc, 0, ok, err))

    def imms_to(self, desc: fl.MemoryRegionDescriptor, imm: int, times: int) -> List[str]:
        return [self._wait(lambda ok, err: self.engine.submit_imm(imm, desc, ok, err)) for _ in range(times)]

    # --- request forms (tests/python/test_forms.py) -----------------------------------------------

    def every(self, imm: int, n: int) -> None:
        seen = self.rounds.setdefault(imm, [])
        self.engine.set_imm_count_every(imm, n, seen.append, lambda err, rounds: self.ends.__setitem__(imm, (err.code, rounds)))

    def every_status(self, imm: int) -> Tuple[int, int, List[int], Any]:
        """(imm_rounds, imm_count, rounds seen, end or None)."""
        return self.engine.imm_rounds(imm), self.engine.imm_count(imm), list(self.rounds.get(imm, [])), self.ends.get(imm)

    def wait_rounds(self, imm: int, n: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while len(self.rounds.get(imm, [])) < n and time.monotonic() < deadline:
            time.sleep(0.002)
        return len(self.rounds.get(imm, [])) >= n

    def wait_count(self, imm: int, n: int, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while self.engine.imm_count(imm) < n and time.monotonic() < deadline:
            time.sleep(0.002)
        return self.engine.imm_count(imm)

    def recvs_into(self, name: str, offset: int, slot: int, count: int) -> None:
        arr, handle, _ = self.regions[name]

        def landed(off: int, length: int) -> None:  # read it now: the slot is reposted after we return
            self.landed.put((off, arrays.to_numpy(arr)[off : off + length].tobytes()))

        self.engine.submit_recvs_into(handle, offset, slot, count, landed)

    def take_landed(self, n: int, timeout: float) -> List[Tuple[int, bytes]]:
        out = []
        deadline = time.monotonic() + timeout
        while len(out) < n:
            try:
                out.append(self.landed.get(timeout=max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                break
        return out

    def send_from(self, addr: fl.DomainAddress, name: str, offset: int, sizes: List[int], seed: int) -> List[str]:
        """Sends pattern(size, seed + i) from region `name` at `offset`, rewriting it only after each send completed."""
        arr, handle, _ = self.regions[name]
        results = []
        for i, n in enumerate(sizes):
            arr[offset : offset + n] = arrays.from_numpy(arrays.pattern(n, seed + i))
            results.append(self._wait(lambda ok, err: self.engine.submit_send_from(addr, handle, offset, n, ok, err)))
        return results

    def address(self) -> fl.DomainAddress:
        return self.engine.main_address

    def callback_errors(self) -> int:
        return fl.callback_error_count()


def serve(conn, provider: str) -> None:
    """Process entry point: runs commands ``(name, args)`` from `conn` until ``("exit", ())``."""
    # libfabric's shm provider writes '<name>,vm.btr' crash reports into the working directory:
    # a directory of the peer's own, removed when serve() returns or raises (a killed peer leaves it).
    workdir = tempfile.TemporaryDirectory(prefix="fabric-lib-peer-")
    os.chdir(workdir.name)
    try:
        _serve_in_workdir(conn, provider)
    finally:
        os.chdir("/")
        workdir.cleanup()


def _serve_in_workdir(conn, provider: str) -> None:
    agent = _Agent(provider)
    conn.send(("ok", agent.engine.main_address))
    while True:
        name, args = conn.recv()
        if name == "exit":
            agent.engine.stop()
            conn.send(("ok", None))
            return
        try:
            conn.send(("ok", getattr(agent, name)(*args)))
        except Exception as e:  # reported to the test, which fails with it
            conn.send(("error", f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))


class Peer:
    """The test side's proxy of a peer process: ``peer.call("read", "dst")``."""

    def __init__(self, provider: str) -> None:
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self.process = ctx.Process(target=serve, args=(child, provider), daemon=True)
        self.process.start()
        child.close()
        self.provider = provider
        # Start: spawn, import numpy (or torch) and fabric_lib, build an engine: about 1-2 s.
        self.address: fl.DomainAddress = self._result(timeout=20)

    def _result(self, timeout: float) -> Any:
        if not self._conn.poll(timeout):
            raise TimeoutError(f"peer ({self.provider}) did not answer within {timeout} s")
        status, value = self._conn.recv()
        if status != "ok":
            raise RuntimeError(f"peer ({self.provider}) failed: {value}")
        return value

    def call(self, name: str, *args: Any, timeout: float = 2 * WAIT_S) -> Any:
        self._conn.send((name, args))
        return self._result(timeout)

    def kill(self) -> None:
        """Ends the peer process without asking (it may have crashed already)."""
        self.process.kill()
        self.process.join(10)
        self._conn.close()

    def close(self) -> None:
        try:
            self._conn.send(("exit", ()))
            self._result(timeout=WAIT_S)
        finally:
            self.process.join(10)
            if self.process.is_alive():
                self.process.kill()

"""asyncio plumbing: the awaitable forms' futures are settled on the event loop that awaits them.

Each loop has one :class:`_LoopCompletions`: the engine's thread that ends an operation queues its
outcome there without taking the GIL and wakes the loop through an eventfd the loop watches; the
loop drains the queue on its own thread. Loops without ``add_reader`` fall back to
``loop.call_soon_threadsafe`` from the callback thread. (docs/python.md, "Semantics specific to
Python".)"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any, Callable, Dict, Optional, Tuple, Union

from ._fabric_lib import FabricError, _AsyncCompletions, _AsyncSlot


def _settle(loop: asyncio.AbstractEventLoop, fut: "asyncio.Future[Any]", result: Any,
            error: Optional[BaseException]) -> None:
    """Resolves ``fut`` on its loop from any thread; a no-op once it is done or its loop closed."""

    def apply() -> None:
        if fut.done():  # e.g. the awaiting task was cancelled or timed out
            return
        if error is None:
            fut.set_result(result)
        else:
            fut.set_exception(error)

    try:
        loop.call_soon_threadsafe(apply)
    except RuntimeError:  # the loop is closed: nobody is waiting any more
        pass


class _LoopCompletions:
    """One event loop's queue of completions (C++: ``_AsyncCompletions``) and its futures by token.
    Used on the loop's thread only."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.native = _AsyncCompletions()
        self.futures: Dict[int, "asyncio.Future[None]"] = {}
        self.next_token = 0
        loop.add_reader(self.native.fd, self.drain)  # NotImplementedError on loops without it

    def add(self, fut: "asyncio.Future[None]") -> _AsyncSlot:
        token = self.next_token
        self.next_token += 1
        self.futures[token] = fut
        return self.native.slot(token)

    def drain(self) -> None:
        for token, error in self.native.drain():
            fut = self.futures.pop(token, None)
            if fut is None or fut.done():  # e.g. the awaiting task was cancelled or timed out
                continue
            if error is None:
                fut.set_result(None)
            else:
                fut.set_exception(error)


# Per loop; an entry goes with its loop. A loop closed while completions are still due never
# drains them: their futures are gone with it, and the queued outcomes are dropped with the queue.
_loops: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Optional[_LoopCompletions]]" = (
    weakref.WeakKeyDictionary())


def _completions_of(loop: asyncio.AbstractEventLoop) -> Optional[_LoopCompletions]:
    try:
        return _loops[loop]
    except KeyError:
        pass
    try:
        completions: Optional[_LoopCompletions] = _LoopCompletions(loop)
    except NotImplementedError:  # a loop that cannot watch an fd
        completions = None
    _loops[loop] = completions
    return completions


def future_callbacks() -> Tuple["asyncio.Future[None]", Union[_AsyncSlot, Callable[[], None]],
                                Optional[Callable[[FabricError], None]]]:
    """A future of the running loop and the ``(on_done, on_error)`` pair that settles it: the
    loop's completion slot (and None), or callables for loops that cannot watch an fd."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[None] = loop.create_future()
    completions = _completions_of(loop)
    if completions is not None:
        return fut, completions.add(fut), None

    def on_done() -> None:
        _settle(loop, fut, None, None)

    def on_error(err: FabricError) -> None:
        _settle(loop, fut, None, err)

    return fut, on_done, on_error


class MessageQueue:
    """Messages of ``TransferEngine.bouncing_recvs_async``, to be awaited on one event loop.

    ``await queue.get()`` returns the next message (bytes) or raises the receive error
    (a FabricError, e.g. CancelledError once the engine stopped).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._queue: asyncio.Queue[Tuple[Optional[bytes], Optional[FabricError]]] = asyncio.Queue()

    def _push(self, item: Tuple[Optional[bytes], Optional[FabricError]]) -> None:
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:  # loop closed
            pass

    def on_recv(self, message: bytes) -> None:
        """Receive callback (runs on the engine's callback thread)."""
        self._push((message, None))

    def on_error(self, err: FabricError) -> None:
        """Receive-error callback (runs on the engine's callback thread)."""
        self._push((None, err))

    async def get(self) -> bytes:
        """The next message; raises the next receive error instead, if that came first."""
        message, err = await self._queue.get()
        if err is not None:
            raise err
        assert message is not None
        return message

    def qsize(self) -> int:
        """Messages (and errors) waiting to be taken."""
        return self._queue.qsize()

"""asyncio plumbing: completions arriving on the engine's callback thread settle futures on the
event loop that awaits them (through ``loop.call_soon_threadsafe``)."""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Optional, Tuple

from ._fabric_lib import FabricError


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


def future_callbacks() -> Tuple["asyncio.Future[None]", Callable[[], None], Callable[[FabricError], None]]:
    """A future of the running loop and the ``(on_done, on_error)`` pair that settles it."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[None] = loop.create_future()

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

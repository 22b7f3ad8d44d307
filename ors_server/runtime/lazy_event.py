"""`LazyEvent`: a one-shot event that costs almost nothing until someone waits on it."""

from __future__ import annotations

import anyio
import anyio.lowlevel


class LazyEvent:
    """`anyio.Event`'s `set`, `is_set`, `wait` and `statistics`, with the `anyio.Event` made only when someone
    waits before the event is set, and dropped once it is.

    An `anyio.Event` is ~760 bytes (asyncio's event and its deque of waiters inside). Every session holds
    events that nobody waits on once they are set (setup ended; the session ended): a server holds tens of
    thousands of idle sessions, each ~1.5 KB lighter for it.
    """

    __slots__ = ("_set", "_event")

    def __init__(self) -> None:
        self._set = False
        self._event: anyio.Event | None = None

    def set(self) -> None:
        self._set = True
        if self._event is not None:
            self._event.set()
            self._event = None

    def is_set(self) -> bool:
        return self._set

    def statistics(self) -> anyio.EventStatistics:
        return self._event.statistics() if self._event is not None else anyio.EventStatistics(tasks_waiting=0)

    async def wait(self) -> None:
        if self._set:
            await anyio.lowlevel.checkpoint()  # as anyio.Event.wait does
            return
        if self._event is None:
            self._event = anyio.Event()
        await self._event.wait()

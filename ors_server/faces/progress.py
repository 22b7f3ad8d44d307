"""`ProgressFeed`: a running call's progress reports, handed from the tool's thread to the face that sends them.

Both faces that forward progress (ORS `progress` events, MCP `notifications/progress`) read them through one: the
tool reports from its thread (or the event loop), the face takes them on the event loop as it can send them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio

if TYPE_CHECKING:
    from ors_server.calls import Progress, ToolCall

PROGRESS_KEPT = 64
"""Reports of one call waiting for its face; past this the oldest are dropped: each report is a snapshot, so a
client slower than the tool loses the stale ones, and the call's result never waits for them."""


class ProgressFeed:
    """The progress reports of one call (pass it as `Calls.start(progress=...)`). Made on the event loop."""

    __slots__ = ("_reports", "_arrived", "_loop")

    def __init__(self) -> None:
        self._reports: deque[Progress] | None = None
        """Made at the first report (every ORS call has a feed; few tools report)."""
        self._arrived: anyio.Event | None = None
        """Made only while the face waits (most calls end before any report and never wait on it)."""
        self._loop = asyncio.get_running_loop()

    def __call__(self, report: Progress) -> None:  # any thread
        # Appended here, before the tool returns: a call's reports are all in the feed once its result is.
        reports = self._reports
        if reports is None:
            reports = self._reports = deque(maxlen=PROGRESS_KEPT)
        reports.append(report)
        with contextlib.suppress(RuntimeError):  # the loop has closed (shutdown): nobody to tell
            self._loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        if self._arrived is not None:
            self._arrived.set()

    def take(self) -> list[Progress]:
        """The reports not yet taken, oldest first."""
        taken: list[Progress] = []
        reports = self._reports
        while reports:
            taken.append(reports.popleft())
        return taken

    async def next_or_end(self, call: ToolCall) -> None:
        """Wait until a report is waiting or `call` has ended."""
        if self._reports or call.done:
            return
        arrived = self._arrived = anyio.Event()  # a report appended from here on wakes it (`_wake` runs after)
        try:
            async with anyio.create_task_group() as waiting:

                async def until(wait: Callable[[], Awaitable[Any]]) -> None:
                    await wait()
                    waiting.cancel_scope.cancel()

                waiting.start_soon(until, call.wait)
                waiting.start_soon(until, arrived.wait)
        finally:
            self._arrived = None

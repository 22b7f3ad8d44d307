"""`CallGate`: which calls may run in one episode at the same time, as `openreward`'s server decides it.

    serialised  (the default) calls of one tool run one at a time, in the order they came; calls of different
                tools overlap
    concurrent  (`@tool(concurrent=True)`) no order among its calls: they overlap with every other call
    exclusive   (`@tool(exclusive=True)`, every `@terminal` tool, `execute_code`, reads of the environment)
                waits for every call in the episode to end, and holds every new one until it has ended

A waiting exclusive call goes before every shared one (serialised or concurrent) that has not started, so a stream
of concurrent calls cannot starve it (openreward's writer-preferring gate). Waiters are granted in the order
they came, whatever they wait for; a serialised call never overtakes an earlier call of its tool.

Every episode has one, so it is small while nobody waits (four slots; the set of the serialised tools running made
while there are any, the queue at the first wait), and a call that nothing stands in the way of enters without an
await.
"""

from __future__ import annotations

import asyncio
from collections import deque


class _Waiter:
    __slots__ = ("tool", "exclusive", "granted")

    def __init__(self, tool: str | None, exclusive: bool, granted: asyncio.Future[None]) -> None:
        self.tool = tool
        self.exclusive = exclusive
        self.granted = granted


class CallGate:
    """The holds on one episode: shared ones (each with its tool when serialised) or one exclusive."""

    __slots__ = ("shared", "exclusive", "tools", "_queue")

    def __init__(self) -> None:
        self.shared = 0
        """Calls holding the episode with others."""
        self.exclusive = False
        """Whether one call (or read) holds the episode alone."""
        self.tools: set[str] | None = None
        """The tools a serialised call of which holds the episode (made at the first such call)."""
        self._queue: deque[_Waiter] | None = None

    @property
    def busy(self) -> bool:
        return self.exclusive or self.shared > 0

    def try_enter(self, tool: str | None, exclusive: bool) -> bool:
        """Hold the episode now if nothing stands in the way (no await): what `_grant` would let in."""
        if self.exclusive:
            return False
        queue = self._queue
        waiting = [waiter for waiter in queue if not waiter.granted.done()] if queue else ()
        if any(waiter.exclusive for waiter in waiting):
            return False  # writer preference, and exclusive calls in the order they came
        if exclusive:
            if self.shared:
                return False
            self.exclusive = True
            return True
        if tool is not None:
            if (self.tools is not None and tool in self.tools) or any(waiter.tool == tool for waiter in waiting):
                return False  # behind the call of its tool that runs, or the earlier ones that wait
            if self.tools is None:
                self.tools = set()
            self.tools.add(tool)
        self.shared += 1
        return True

    async def enter(self, tool: str | None, exclusive: bool) -> None:
        """Hold the episode once the calls before this one let it (`tool`: a serialised call's tool, None for a
        concurrent one; `exclusive`: alone). A cancelled wait holds nothing."""
        if self.try_enter(tool, exclusive):
            return
        waiter = _Waiter(tool, exclusive, asyncio.get_running_loop().create_future())
        if self._queue is None:
            self._queue = deque()
        self._queue.append(waiter)
        try:
            await waiter.granted
        except BaseException:
            if waiter.granted.done() and not waiter.granted.cancelled():
                self.leave(tool, exclusive)  # granted as the wait was cancelled: give it back
            else:
                self._queue.remove(waiter)
                self._grant()  # a waiting exclusive call gone may let shared ones in
            raise
        finally:
            if not self._queue:
                self._queue = None  # ~600 bytes an idle episode need not keep

    def leave(self, tool: str | None, exclusive: bool) -> None:
        if exclusive:
            self.exclusive = False
        else:
            self.shared -= 1
            if tool is not None and self.tools is not None:
                self.tools.discard(tool)
                if not self.tools:
                    self.tools = None  # ~200 bytes an idle episode need not keep
        if self._queue:
            self._grant()

    def _grant(self) -> None:
        """Let in, in order, the waiters nothing stands in the way of any more (skipping those whose wait was just
        cancelled: they leave the queue themselves)."""
        queue = self._queue
        if not queue:
            return
        waiting = [waiter for waiter in queue if not waiter.granted.done()]
        writer = next((waiter for waiter in waiting if waiter.exclusive), None)
        if writer is not None:
            # Writer preference: no shared call starts while an exclusive one waits.
            if not self.exclusive and not self.shared:
                queue.remove(writer)
                self.exclusive = True
                writer.granted.set_result(None)
            return
        if self.exclusive:
            return
        passed: set[str] = set()  # tools with an earlier waiter still waiting: their later calls wait behind it
        for waiter in waiting:
            tool = waiter.tool
            if tool is not None and ((self.tools is not None and tool in self.tools) or tool in passed):
                passed.add(tool)
                continue
            queue.remove(waiter)
            if tool is not None:
                if self.tools is None:
                    self.tools = set()
                self.tools.add(tool)
            self.shared += 1
            waiter.granted.set_result(None)

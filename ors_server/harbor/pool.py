"""Warm containers: for each task, a few containers started ahead of time with their shell open (`--harbor-pool`).

A session takes one at once if one is ready (else it starts its own), and the pool starts another in the
background. Starting is bounded across tasks (`STARTING_AT_ONCE`), so filling the pools of many tasks never takes
more than a couple of cores. A pooled container whose shell died is removed rather than handed out.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import anyio

from ors_server.sandboxes.container import Container

logger = logging.getLogger("ors_server.harbor")

STARTING_AT_ONCE = 2
"""Containers started for the pools at once, over every task of a process."""


class WarmPool:
    """Ready containers of one task. `take()` one; `run()` keeps `size` ready until cancelled, then removes them."""

    def __init__(self, size: int, start: Callable[[], Awaitable[Container]], limiter: anyio.CapacityLimiter) -> None:
        self.size = size
        self._start = start
        self._limiter = limiter
        self.ready: list[Container] = []
        self._wanted = anyio.Event()
        self._wanted.set()
        self.failures = 0

    def take(self) -> Container | None:
        """A ready container, or None; the pool starts another."""
        while self.ready:
            container = self.ready.pop(0)
            self._wanted.set()
            shell = container.shell
            if shell is not None and shell.pid is not None:
                return container
            self._discard(container)
        self._wanted.set()
        return None

    def _discard(self, container: Container) -> None:
        self._removals.append(container)

    async def run(self) -> None:
        """Keep the pool full; on cancellation (the server stops) remove what it holds."""
        self._removals: list[Container] = []
        try:
            while True:
                await self._wanted.wait()
                self._wanted = anyio.Event()
                for container in self._removals:
                    await container.remove()
                self._removals.clear()
                while len(self.ready) < self.size:
                    try:
                        async with self._limiter:
                            container = await self._start()
                    except Exception as exc:  # noqa: BLE001 (the next session tries for itself and reports it)
                        self.failures += 1
                        logger.warning("the warm pool could not start a container: %r", exc, exc_info=True)
                        await anyio.sleep(min(30.0, 2.0**self.failures))
                        continue
                    self.failures = 0
                    self.ready.append(container)
        finally:
            with anyio.CancelScope(shield=True):
                held, self.ready = self.ready + self._removals, []
                for container in held:
                    await container.remove()

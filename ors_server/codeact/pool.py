"""A few CodeAct sandboxes started ahead of time, so that a step does not wait for bubblewrap and Python to start.

A pooled sandbox is exactly the one a step would start for itself (`start_sandbox`: same launcher, same
bubblewrap flags, same seccomp filter, same uid), started early and left waiting, idle, for its request; the
rlimits are applied by the child after it reads the request, as in an unpooled step. Each sandbox serves one
step and is then destroyed (`run_step` kills it): nothing is ever reused across steps or sessions.

Bounded: at most `size` sandboxes exist in the pool at any time, started one after another by one background
task, never on a call's path; a replacement is started once the step that took a sandbox has ended, so that it
does not compete with that step for CPU. A step that finds the pool empty starts its own, as without a pool. The
pool fills at startup when the server offers CodeAct to every session, else at the first step. At shutdown, and
when the server dies (`--die-with-parent`, and the closed stdin pipe ends a waiting child), every member ends with it.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import anyio.abc

from ors_server.codeact.executor import ProtocolError, Started, start_sandbox
from ors_server.codeact.sandbox import SandboxMode, SandboxUnavailable, check_sandbox

logger = logging.getLogger("ors_server.codeact")

READY_WAIT = 30.0
"""Seconds a pooled sandbox may take to start (a loaded machine); past that the pool stops filling."""
READY_BYTES = 1024


class SandboxPool:
    """Up to `size` pre-started sandboxes of one kind (`sandbox` mode, /tmp of `tmp_bytes`). Run it with
    `async with pool.run():`; outside that, `take` always answers None."""

    def __init__(self, size: int, sandbox: SandboxMode, tmp_bytes: int) -> None:
        if size < 0:
            raise ValueError(f"a sandbox pool's size must not be negative, got {size!r}")
        self.size = size
        self.sandbox: SandboxMode = sandbox
        self.tmp_bytes = tmp_bytes
        self._ready: deque[Started] = deque()
        self._wanted = anyio.Event()
        self._full = anyio.Event()
        self._task_group: anyio.abc.TaskGroup | None = None
        self._broken = False
        self._starting: Started | None = None
        self.taken = 0
        """Steps that ran in a pooled sandbox."""
        self.started = 0
        """Sandboxes the pool started."""

    def __len__(self) -> int:
        return len(self._ready)

    def pids(self) -> set[int]:
        """The processes the pool holds now (ready or starting); a step's process is not among them."""
        held = [*self._ready, *([self._starting] if self._starting is not None else [])]
        return {started.process.pid for started in held}

    async def discard(self, started: Started) -> None:
        """Destroy the sandbox of a step that has ended (`run_step` has killed it) and start replacing it. While the
        pool runs, the dead process is reaped in the background, so that the step's answer does not wait for it;
        the pool's shutdown waits for it. Outside `run`, it is destroyed now."""
        if self._task_group is None:
            await started.destroy()
        else:
            self._task_group.start_soon(self._destroy, started)
        self.refill()

    @staticmethod
    async def _destroy(started: Started) -> None:
        with anyio.CancelScope(shield=True):  # the pool's shutdown cancels its tasks: this one ends anyway
            await started.destroy()

    @asynccontextmanager
    async def run(self, *, fill: bool = True) -> AsyncIterator[SandboxPool]:
        """Keep the pool filled in the background; `fill=False` waits for the first `take` to start filling it."""
        if self.size == 0:
            yield self
            return
        try:
            async with anyio.create_task_group() as task_group:
                self._task_group = task_group
                task_group.start_soon(self._refill_forever)
                if fill:
                    self._wanted.set()
                try:
                    yield self
                finally:
                    task_group.cancel_scope.cancel()
        finally:
            self._task_group = None
            with anyio.CancelScope(shield=True):
                while self._ready:
                    await self._ready.popleft().destroy()

    async def filled(self) -> None:
        """Return once the pool holds `size` sandboxes, or has stopped filling (for tests and benchmarks; bound the
        wait yourself). A pool of size 0, or not running, is as full as it gets."""
        if self.size == 0 or self._task_group is None:
            return
        self._wanted.set()
        await self._full.wait()

    async def take(self, sandbox: SandboxMode, tmp_bytes: int) -> Started | None:
        """A pre-started sandbox for one step, removed from the pool, or None when the pool has none of this kind
        ready: the caller then starts its own. The caller calls `discard` when its step has ended."""
        if self._task_group is None or (sandbox, tmp_bytes) != (self.sandbox, self.tmp_bytes):
            return None
        if not self._ready:
            self._wanted.set()  # none ready: fill now (the first step of a server started without --codeact)
        while self._ready:
            started = self._ready.popleft()
            self._full = anyio.Event()
            if started.process.poll() is None:
                self.taken += 1
                return started
            await started.destroy()  # died while waiting (killed from outside): never hand it out
        return None

    def refill(self) -> None:
        """Start replacing what steps took. `discard` calls it once its step has ended, so that starting the
        replacement (tens of milliseconds of CPU) does not compete with that step."""
        self._wanted.set()

    async def _refill_forever(self) -> None:
        while not self._broken:
            await self._wanted.wait()
            self._wanted = anyio.Event()
            while len(self._ready) < self.size and not self._broken:
                await self._start_one()
            self._full.set()

    async def _start_one(self) -> None:
        """Start one sandbox and add it once its child says it is ready; on failure, stop filling for good."""
        starting: Started | None = None
        try:
            await anyio.to_thread.run_sync(check_sandbox, self.sandbox)  # cached after the first probe
            # Shielded, so that a started process is always in reach of the `finally` below.
            with anyio.CancelScope(shield=True):
                starting = started = self._starting = await start_sandbox(self.sandbox, self.tmp_bytes)
                self.started += 1
            with anyio.fail_after(READY_WAIT):
                await started.wait_ready(READY_BYTES)
            self._ready.append(started)
        except (
            SandboxUnavailable,
            OSError,
            TimeoutError,
            anyio.EndOfStream,
            anyio.BrokenResourceError,
            ProtocolError,
        ) as exc:
            # Steps then start their own sandbox, and report any problem with it to the agent.
            logger.warning("the CodeAct sandbox pool stops filling: %s", str(exc) or type(exc).__name__)
            self._broken = True
        finally:
            self._starting = None
            if starting is not None and not starting.ready:
                with anyio.CancelScope(shield=True):
                    await starting.destroy()

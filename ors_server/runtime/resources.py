"""`Runtime`: what sessions and their calls run on, apart from the store's own bookkeeping of them.

    limiters        three pools of worker threads for sync user code: tool calls; discovery (split and task
                    listings); lifecycle work (task_from_seed, construction, setup, teardown, reads), so discovery
                    and lifecycle work never queue behind hung tool calls
    spawn           tasks that outlive the request that started them (each call, each episode's start and finish)
    catalogue       the tools environment classes gain from their MCP tool servers, listed once per class
    codeact_pool    sandboxes started ahead of time for CodeAct steps
    confined        how the processes of environments' stdio tool servers are confined

The session store owns one and runs it for its lifetime (`SessionStore.run`); the call pipeline and the faces
reach it as `store.runtime`.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, Literal

import anyio
import anyio.abc

from ors_server.codeact.pool import SandboxPool
from ors_server.codeact.sandbox import sandbox_mode
from ors_server.compose.catalogue import Catalogue
from ors_server.compose.toolbox import Toolbox
from ors_server.environment import Environment
from ors_server.runtime.worker_threads import run_in_thread
from ors_server.sandboxes.confinement import Confinement
from ors_server.settings import Settings

logger = logging.getLogger("ors_server.sessions")

Pool = Literal["tools", "discovery", "lifecycle"]


async def run_user_code(function: Callable[..., Any], *args: Any, limiter: anyio.CapacityLimiter | None = None) -> Any:
    """Await async user code; run sync user code in a worker thread so it never blocks the event loop."""
    if inspect.iscoroutinefunction(function):
        return await function(*args)
    call = functools.partial(function, *args)
    result = await run_in_thread(call, limiter)
    if inspect.isawaitable(result):
        result = await result
    return result


class Runtime:
    """Worker threads, background tasks, the composed tools' catalogue and CodeAct's sandbox pool of one store."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.limiters: dict[Pool, anyio.CapacityLimiter] = {
            "tools": anyio.CapacityLimiter(settings.tool_threads),
            "discovery": anyio.CapacityLimiter(settings.discovery_threads),
            "lifecycle": anyio.CapacityLimiter(settings.lifecycle_threads),
        }
        """Worker threads per kind of work: tool calls; task and split listings; setup, reset, teardown, reads."""
        self.catalogue = Catalogue()
        """The tools environment classes gain from their MCP tool servers."""
        self.codeact_pool = SandboxPool(
            settings.codeact_pool, sandbox_mode(settings.codeact_sandbox), settings.codeact_disk_bytes
        )
        """Sandboxes started ahead of time for CodeAct steps (each used by one step, then destroyed)."""
        self.confined = Confinement.of(settings)
        """How the processes of environments' stdio tool servers are confined."""
        self.task_group: anyio.abc.TaskGroup | None = None
        """Where long-lived tasks run (the reaper, tool-server connections), while the runtime runs."""
        self._spawned: set[asyncio.Task[Any]] = set()
        """The tasks `spawn` started and that have not ended."""

    @asynccontextmanager
    async def run(self) -> AsyncIterator[anyio.abc.TaskGroup]:
        """Run for the store's lifetime: its `finally` (shutdown) runs inside, then spawned tasks are cancelled. The
        sandbox pool is closed last, after every session (and so every step) has ended."""
        async with self.codeact_pool.run(fill=self.settings.codeact), anyio.create_task_group() as task_group:
            self.task_group = task_group
            try:
                yield task_group
            finally:
                with anyio.CancelScope(shield=True):
                    await self._cancel_spawned()
                task_group.cancel_scope.cancel()
        self.task_group = None

    def spawn(self, function: Callable[..., Any], *args: Any) -> None:
        """Run `function(*args)` as a task of the store: it outlives the request that started it, and the store
        cancels it when it stops. A plain asyncio task, not one of a task group's: spawning is on every call's path
        (a task group's spawn measured ~4x the cost), and an exception that escapes one fails that task alone."""
        if self.task_group is None:
            raise RuntimeError("the session store is not running: use `async with store.run():`")
        task = asyncio.get_running_loop().create_task(function(*args))
        self._spawned.add(task)
        task.add_done_callback(self._spawned_done)

    def _spawned_done(self, task: asyncio.Task[Any]) -> None:
        self._spawned.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            logger.error("a task of the session store failed", exc_info=exc)

    async def _cancel_spawned(self) -> None:
        while self._spawned:
            tasks = list(self._spawned)
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks)

    async def discover(self, function: Callable[..., Any], *args: Any) -> Any:
        """Run an environment's class-level listing (splits, tasks) on the discovery threads."""
        return await run_user_code(function, *args, limiter=self.limiters["discovery"])

    async def lifecycle(self, function: Callable[..., Any], *args: Any) -> Any:
        """Run lifecycle user code (task_from_seed, teardown, reads of the environment) on the lifecycle threads."""
        return await run_user_code(function, *args, limiter=self.limiters["lifecycle"])

    async def load_catalogue(self, env_cls: type[Environment], toolbox: Toolbox | None = None) -> None:
        """List the tools of `env_cls`'s MCP tool servers the first time (through `toolbox`, an episode's open
        connections, else starting them to ask; boundedly)."""
        assert self.task_group is not None
        await self.catalogue.load(env_cls, self.task_group, self.settings.tool_server_start_timeout, toolbox)

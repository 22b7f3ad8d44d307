"""The host processes of one environment: sessions placed on them, a bounded number per process.

A new session (episode) goes to the first live process with room (fewer than `--host-sessions` sessions); when
none has room a new process is started, up to `--host-processes` per environment, past which the session's setup
fails with a message naming both settings. Class-level requests (task listings) go to any live process. A process
that dies is forgotten and logged; the next placement starts another. One whose call was abandoned at
`--tool-timeout` is retired: it takes no new session and is killed when its last session ends (it may hold a
thread that never returns). Closing the pool kills every process it started.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import anyio
import anyio.abc

from ors_server.hosting.process import HostFailed, HostProcess, HostSpec, reply_limit
from ors_server.sandboxes.confinement import Confinement
from ors_server.settings import Settings

logger = logging.getLogger("ors_server.hosting")


class HostPool:
    def __init__(self, spec: HostSpec, settings: Settings, per_process: int | None = None) -> None:
        self.spec = replace(
            spec,
            memory_bytes=settings.host_memory_bytes,
            log_bytes=settings.tool_server_log_bytes,
            reply_bytes=reply_limit(settings.max_output_chars),
            confinement=Confinement.of(settings),
        )
        self.settings = settings
        self.hosts: list[HostProcess] = []
        self.started = 0
        """Processes started over the pool's life (a replaced one counts again)."""
        self._lock = anyio.Lock()
        self._group: anyio.abc.TaskGroup | None = None
        self._closing = False
        self.on_end: list[Callable[[HostProcess], None]] = []
        """Called with a process that ended on its own (died, or broke the protocol), before it is forgotten."""
        self.per_process = min(settings.host_sessions, per_process or settings.host_sessions)
        """Sessions per process: `--host-sessions`, or fewer when the class says so (an OpenEnv class that does
        not declare `SUPPORTS_CONCURRENT_SESSIONS` gets a process per session)."""

    @asynccontextmanager
    async def run(self) -> AsyncIterator[HostPool]:
        async with anyio.create_task_group() as group:
            self._group = group
            group.start_soon(self._warm)
            try:
                yield self
            finally:
                self._closing = True
                for host in self.hosts:
                    host.kill()
                group.cancel_scope.cancel()
        self._group = None

    async def _warm(self) -> None:
        """Start the first process ahead of the first session (a framework's import can take seconds)."""
        try:
            await self.any()
        except Exception as exc:
            logger.warning("host process of %s did not start: %s", self.spec.label, exc)

    def _live(self) -> list[HostProcess]:
        return [host for host in self.hosts if host.dead is None]

    async def place(self) -> HostProcess:
        """A process with room for one more session, counted there (give it back with `release`)."""
        async with self._lock:
            for host in self._live():
                if not host.retired and host.sessions < self.per_process:
                    host.sessions += 1
                    return host
            if len([h for h in self._live() if not h.retired]) >= self.settings.host_processes:
                raise HostFailed(
                    f"every host process of {self.spec.label} is full: {self.settings.host_processes} processes "
                    f"(--host-processes) of {self.settings.host_sessions} sessions each (--host-sessions)"
                )
            host = await self._start()
            host.sessions += 1
            return host

    def release(self, host: HostProcess) -> None:
        host.sessions -= 1
        if host.retired and host.sessions <= 0:
            logger.info(
                "retired host process %d (pid %d) of %s ends: its last session ended",
                host.number,
                host.pid,
                self.spec.label,
            )
            host.kill()

    def retire(self, host: HostProcess, why: str) -> None:
        if not host.retired:
            host.retired = True
            logger.warning(
                "host process %d (pid %d) of %s retired: %s; it takes no new sessions and ends with its last one",
                host.number,
                host.pid,
                self.spec.label,
                why,
            )
        if host.sessions <= 0:
            host.kill()

    async def any(self) -> HostProcess:
        """A live process for a class-level request, started if there is none."""
        async with self._lock:
            live = self._live()
            if live:
                return min(live, key=lambda host: (host.retired, host.sessions))
            return await self._start()

    async def _start(self) -> HostProcess:
        if self._group is None or self._closing:
            raise HostFailed(f"the host pool of {self.spec.label} is closed")
        host = HostProcess(self.spec)
        await self._group.start(self._keep, host)
        return host

    async def _keep(self, host: HostProcess, *, task_status: anyio.abc.TaskStatus[Any]) -> None:
        """Run one process for as long as it lives; log its end unless the pool closed it."""
        self.hosts.append(host)
        self.started += 1
        started = False

        def ready() -> None:
            nonlocal started
            started = True
            logger.info("host process %d (pid %d) of %s started", host.number, host.pid, self.spec.label)
            task_status.started()

        try:
            await host.run(ready, self.settings.host_start_timeout)
        except Exception as exc:
            if not started:
                raise
            logger.exception("host process %d of %s failed: %s", host.number, self.spec.label, exc)
        finally:
            self.hosts.remove(host)
            if started and not self._closing and not (host.retired and host.sessions <= 0):
                logger.warning(
                    "host process %d (pid %d) of %s ended: %s; its %d sessions end",
                    host.number,
                    host.pid,
                    self.spec.label,
                    host.dead,
                    host.sessions,
                )
                for listener in self.on_end:
                    try:
                        listener(host)
                    except Exception:
                        logger.exception("ending the sessions of host process %d failed", host.number)
